package server_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hongbao-io/hongbao/client/wire"
	"github.com/hongbao-io/hongbao/proto"
)

// Malformed frames, garbage and zero bytes, before and after LOGIN, and
// connections that close or reset without a byte.

// garbageCode is the ERROR that bytes starting with b earn: the decoder
// judges len with 2 bytes, then the type with the third.
func garbageCode(b []byte) uint8 {
	switch n := binary.BigEndian.Uint16(b); {
	case n < proto.HeaderLen:
		return proto.ErrCodeMalformed
	case n > proto.MaxFrameLen:
		return proto.ErrCodeTooLarge
	}
	return proto.ErrCodeUnknownType
}

// attackMalformed sends every malformed frame of docs/PROTOCOL.md before and
// after LOGIN, garbage, zero bytes, and connections that close (or reset)
// without a byte: each must get its ERROR and the close.
func attackMalformed(a *attacker) {
	t, sz := a.t, a.sz
	type job struct {
		name  string
		login bool
		data  []byte
		code  uint8 // 0: nothing sent; just close
	}
	var jobs []job
	for _, mc := range malformedCases() {
		jobs = append(jobs, job{"before LOGIN: " + mc.name, false, mc.frame, mc.code},
			job{"after LOGIN: " + mc.name, true, mc.frame, mc.code})
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 16 {
		g := make([]byte, 3+rng.IntN(2000))
		for j := range g {
			g[j] = byte(rng.Uint32())
		}
		g[2] = 0x80 | g[2] // a server-to-client or unused type: never a request
		jobs = append(jobs, job{fmt.Sprintf("garbage %d", i), i%2 == 1, g, garbageCode(g)})
	}
	zeros := make([]byte, 256)
	jobs = append(jobs, job{"zero bytes before LOGIN", false, zeros, proto.ErrCodeMalformed},
		job{"zero bytes after LOGIN", true, zeros, proto.ErrCodeMalformed},
		job{"connect and close", false, nil, 0}, job{"connect and reset", false, nil, 0})

	n := len(jobs) * sz.Rounds
	var cases atomic.Int64
	failed, err := swarm(n, 32, func(i int) error {
		j := jobs[i%len(jobs)]
		var c *wire.Conn
		var err error
		if j.login {
			c, err = attackLogin(a.ts, malformedUsers+uint32(i))
		} else {
			c, err = attackDial(a.ts)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", j.name, err)
		}
		defer c.Close()
		if j.code == 0 {
			if strings.Contains(j.name, "reset") {
				reset(c.Conn)
			}
			return nil
		}
		data := j.data
		if j.login { // a good frame first: answered before the ERROR
			data = append(proto.AppendPing(nil, 5), data...)
		}
		c.SetWriteDeadline(time.Now().Add(waitTime))
		c.Send(data) // may fail if the server has already closed it: what it answered is read below
		pongs := 0
		skip := func(f proto.Frame) bool {
			switch {
			case f.Type == proto.Pong && f.Stamp == 5 && j.login && pongs == 0:
				pongs++
				return true
			case f.Type == proto.Envelope && j.login: // the send campaign picks any online user
				return true
			}
			return false
		}
		if err := expectErrorClose(c, j.code, skip); err != nil {
			return fmt.Errorf("%s: %w", j.name, err)
		}
		if j.login && pongs != 1 {
			return fmt.Errorf("%s: the PING before the bad frame was not answered", j.name)
		}
		cases.Add(1)
		return nil
	})
	if failed > 0 {
		t.Errorf("malformed: %d of %d connections not answered as docs/PROTOCOL.md says: %v", failed, n, err)
	}
	t.Logf("malformed: %d connections (%d kinds × %d), %d answered ERROR then closed", n, len(jobs), sz.Rounds, cases.Load())
}
