package main

import (
	"fmt"
	"time"

	"github.com/hongbao-io/hongbao/client/wire"
	"github.com/hongbao-io/hongbao/proto"
)

const (
	witnessBase   = 2_000_000 // above the probes': the witness of SET s is the first user of s from it
	witnessShakes = 5         // each witness's SHAKEs while its gateway is stopped
)

// witnesses are a user per SET of a gateway about to be stopped, logged in
// there: while it is stopped each sends SHAKEs, which the gateway reads
// only once it runs again, after the others took its SETs over. Every
// money answer they then get is one a fenced gateway told: there must be
// none. (The probes, which leave a silent gateway, cannot see it.)
type witnesses struct {
	sets            []int
	conns           []*wire.Conn
	money, answered []int    // by witness: SHAKE_RESULT 1, and every SHAKE_RESULT
	ended           []string // why its connection ended
}

// dialWitnesses logs a witness of each of sets in at addr, which runs them.
func dialWitnesses(addr string, sets []int, nsets int) (*witnesses, error) {
	w := &witnesses{sets: sets}
	for _, s := range sets {
		c, err := wire.DialLogin(addr, uint32((witnessBase/nsets+1)*nsets+s))
		if err != nil {
			w.close()
			return nil, fmt.Errorf("the witness of SET %d: %w", s, err)
		}
		w.conns = append(w.conns, c)
	}
	return w, nil
}

// send writes each witness's SHAKEs: they wait in the socket while the
// gateway is stopped.
func (w *witnesses) send() {
	var b []byte
	for i := range witnessShakes {
		b = proto.AppendShake(b, uint64(i+1))
	}
	for _, c := range w.conns {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write(b)
	}
}

// read reads what each witness gets until its connection ends or within d
// in all, and closes them.
func (w *witnesses) read(d time.Duration) {
	deadline := time.Now().Add(d)
	w.money, w.answered, w.ended = make([]int, len(w.conns)), make([]int, len(w.conns)), make([]string, len(w.conns))
	for i, c := range w.conns {
		for {
			f, err := c.Next(time.Until(deadline))
			if err != nil {
				w.ended[i] = err.Error()
				break
			}
			if f.Type == proto.Error {
				w.ended[i] = fmt.Sprintf("ERROR %d", f.ErrorCode())
				continue
			}
			if f.Type != proto.ShakeResult {
				continue
			}
			w.answered[i]++
			if st, _, _ := f.ShakeResult(); st == proto.ShakeGot {
				w.money[i]++
			}
		}
	}
	w.close()
}

func (w *witnesses) close() {
	for _, c := range w.conns {
		c.Close()
	}
}
