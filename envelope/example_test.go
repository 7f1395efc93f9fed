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

// The campaign producer deals what its Pacer says is due at each tick.
func ExampleDealer() {
	const second = 1_000_000_000
	p := envelope.NewPacer(0, 10, 25) // 10 a second, 25 in all
	d, err := envelope.NewDealer(3, 4)
	if err != nil {
		panic(err)
	}
	var dealt uint64
	for _, now := range []int64{second / 2, second, 3 * second} {
		fmt.Printf("t=%.1fs:", float64(now)/second)
		d.Deal(p.Due(now)-dealt, func(set int, count uint32) {
			fmt.Printf(" SET %d×%d", set, count)
			dealt += uint64(count)
		})
		fmt.Println()
	}
	// Output:
	// t=0.5s: SET 0×2 SET 1×2 SET 2×1
	// t=1.0s: SET 2×2 SET 0×2 SET 1×1
	// t=3.0s: SET 1×4 SET 1×1 SET 2×4 SET 2×1 SET 0×4 SET 0×1
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
