package hongbaotest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hongbao-io/hongbao/client"
	"github.com/hongbao-io/hongbao/hongbaotest"
)

// A user's test as an application would write it: a server in the test,
// its pools filled, a client that shakes until they are empty, and the
// money it got equal to what the server counted.
func TestServerForAnApplicationsTest(t *testing.T) {
	srv := hongbaotest.NewServer(t)
	srv.Shake(t, 50, 100, 500)
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(ctx, 7, nil); err != nil {
		t.Fatal(err)
	}
	var got, fen uint64
	for {
		_, amount, err := c.Shake(ctx)
		if errors.Is(err, client.ErrEmpty) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got++
		fen += uint64(amount)
	}
	st := srv.Stats()
	if got != 50 || st.Shake.Got != got || st.Shake.GotAmount != fen {
		t.Fatalf("the client got %d envelopes, %d fen; the server counts %d, %d; want 50 each", got, fen, st.Shake.Got, st.Shake.GotAmount)
	}
}
