package envelope_test

import (
	"fmt"

	"github.com/hongbao-io/hongbao/envelope"
)

// The split stage draws a share per OPEN; the last takes the rest.
func ExampleDrawShare() {
	rnd := envelope.NewRand(42)
	remaining, shares := uint64(1000), uint32(5)
	for ; shares > 0; shares-- {
		s := envelope.DrawShare(&rnd, remaining, shares)
		fmt.Print(s, " ")
		remaining -= s
	}
	fmt.Println("left:", remaining)
	// Output: 296 57 120 182 345 left: 0
}

// An OPEN is routed on the id alone.
func ExampleOwnerSET() {
	g, err := envelope.NewGroupIDGen(17, 1_800_000_000_000_000_000)
	if err != nil {
		panic(err)
	}
	id := g.Next()
	fmt.Println(envelope.OwnerSET(id), envelope.IsShake(id))
	// Output: 17 false
}
