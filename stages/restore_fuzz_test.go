package stages_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/set"
	"github.com/hongbao-io/hongbao/stages"
)

// FuzzSplitRestore feeds the split stage an arbitrary snapshot part and
// arbitrary records of its producer, as a restore reads them from a
// journal or a snapshot it does not trust: each is taken or refused with an
// error, never a panic, and what was taken balances (the ledger's
// invariants).
func FuzzSplitRestore(f *testing.F) {
	create := binary.BigEndian.AppendUint64(nil, 1<<51|7)                           // id
	create = binary.BigEndian.AppendUint32(create, 0)                               // campaign
	create = binary.BigEndian.AppendUint32(create, 2)                               // sender
	create = binary.BigEndian.AppendUint32(create, 100)                             // total
	create = binary.BigEndian.AppendUint64(create, uint64(time.Hour.Nanoseconds())) // expires
	create = binary.BigEndian.AppendUint32(create, 3)                               // recipient
	draw := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, 1<<51|7), 3), 100)
	crossed := binary.BigEndian.AppendUint32(draw, 9)
	recs := append([]byte{stages.RecCreate, byte(len(create))}, create...)
	recs = append(append(recs, stages.RecDrawCrossed, byte(len(crossed))), crossed...)
	crossing := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, 1<<51|7), 3), 9), 0)
	f.Add([]byte{}, recs)
	f.Add([]byte{}, append(append(recs, stages.RecCrossing, byte(len(crossing))), crossing...))
	f.Add(make([]byte, 64), []byte{stages.RecUnopen, 16})
	f.Fuzz(func(t *testing.T, part, recs []byte) {
		j, err := journal.Open(journal.Options{Dir: t.TempDir(), Sets: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		lim := stages.Limits{MaxShares: 100, MaxTotal: 20000, TTL: time.Hour}
		_, sets, err := set.Build(1, set.Options{Ring: 64, Limits: lim, MaxPending: 64 << 10, Seed: 1, Journal: j})
		if err != nil {
			t.Fatal(err)
		}
		pid := uint16(sets[0].PIDs()[1])
		now := time.Now().UnixNano()
		if len(part) > 0 {
			if _, err := sets[0].Load(pid, part, now); err != nil {
				return
			}
		}
		defer func() {
			st := ledger.Sum(set.Ledgers(sets))
			if err := st.Check(); err != nil {
				t.Fatalf("restored state does not balance: %v", err)
			}
		}()
		for len(recs) >= 2 {
			typ, n := recs[0], min(int(recs[1]), len(recs)-2)
			r := journal.Record{PID: pid, Type: typ, Payload: recs[2 : 2+n]}
			recs = recs[2+n:]
			if _, err := sets[0].Apply(r, now); err != nil {
				return
			}
		}
	})
}
