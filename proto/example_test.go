package proto_test

import (
	"fmt"

	"github.com/hongbao-io/hongbao/proto"
)

// A connection's reader appends what arrived to its buffer, decodes every complete frame and
// keeps the rest for the next read. Here a LOGIN and an OPEN arrive with half a PING.
func ExampleNextRequest() {
	var in []byte
	in = proto.AppendLogin(in, 1, 42, nil)
	in = proto.AppendOpen(in, 2, 7001)
	in = append(in, proto.AppendPing(nil, 3)[:6]...)

	for {
		f, n, err := proto.NextRequest(in)
		if err != nil {
			fmt.Println("answer ERROR", err.(*proto.Violation).Code, "and close")
			return
		}
		if n == 0 {
			break // wait for more bytes
		}
		switch f.Type {
		case proto.Login:
			user, token := f.Login()
			fmt.Printf("%v stamp=%d user=%d token=%d bytes\n", f.Type, f.Stamp, user, len(token))
		case proto.Open:
			fmt.Printf("%v stamp=%d envelope=%d\n", f.Type, f.Stamp, f.Open())
		}
		in = in[n:]
	}
	fmt.Println(len(in), "bytes kept for the next read")

	_, _, err := proto.NextRequest(proto.AppendPong(nil, 4))
	fmt.Println(err)
	// Output:
	// LOGIN stamp=1 user=42 token=0 bytes
	// OPEN stamp=2 envelope=7001
	// 6 bytes kept for the next read
	// proto: PONG is not a request type (ERROR 2)
}

func ExampleMintToken() {
	secret := []byte("s3cret")
	token := proto.MintToken(nil, secret, 42, 1700000000)
	login := proto.AppendLogin(nil, 1, 42, token)

	v := proto.NewVerifier(secret) // one per event loop
	f, _, _ := proto.NextRequest(login)
	user, tok := f.Login()
	fmt.Println(len(tok), v.Verify(user, tok, 1700000000), v.Verify(user, tok, 1700000001))
	// Output: 40 true false
}
