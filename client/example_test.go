package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/hongbao-io/hongbao/client"
	"github.com/hongbao-io/hongbao/hongbaotest"
	"github.com/hongbao-io/hongbao/proto"
)

// startServer runs a hongbao server in this process for the examples
// (package hongbaotest, as an application's own tests would); stop shuts
// it down.
func startServer() (addr string, stop func()) {
	srv, err := hongbaotest.Start()
	if err != nil {
		log.Fatal(err)
	}
	return srv.Addr, srv.Close
}

// Two users: alice sends bob a group envelope of 1.00 yuan; bob is pushed
// it, opens it, and opening it again gets the same share back.
func Example() {
	addr, stop := startServer()
	defer stop()
	ctx := context.Background()

	alice, err := client.Dial(ctx, []string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer alice.Close()
	bob, err := client.Dial(ctx, []string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer bob.Close()
	if err := alice.Login(ctx, 1, nil); err != nil {
		log.Fatal(err)
	}
	if err := bob.Login(ctx, 2, nil); err != nil {
		log.Fatal(err)
	}

	env, err := alice.Send(ctx, 100, []uint32{2})
	if err != nil {
		log.Fatal(err)
	}
	p := <-bob.Pushes()
	fmt.Println(p.Type, "from", p.Sender, "of", p.Total, "fen, the one sent:", p.Envelope == env)

	share, err := bob.Open(ctx, p.Envelope)
	fmt.Println("bob's share:", share, err)
	share, err = bob.Open(ctx, p.Envelope)
	fmt.Println("again:", share, errors.Is(err, client.ErrAlreadyOpened))
	// Output:
	// ENVELOPE from 1 of 100 fen, the one sent: true
	// bob's share: 100 <nil>
	// again: 100 true
}

// A refusal is an error whose kind errors.Is tells: here no shake
// campaign has filled the pools yet.
func ExampleClient_Shake() {
	addr, stop := startServer()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(ctx, 7, nil); err != nil {
		log.Fatal(err)
	}
	_, _, err = c.Shake(ctx)
	var se *client.StatusError
	fmt.Println(errors.Is(err, client.ErrEmpty), errors.As(err, &se) && se.Status == proto.ShakeNothing)
	fmt.Println(err)
	// Output:
	// true true
	// hongbao: SHAKE_RESULT 0: nothing this time: the pool is empty
}
