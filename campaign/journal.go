package campaign

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hongbao-io/hongbao/journal"
)

// The campaign runner's journal records. A campaign's progress is not among
// them: it is the SETs' records of what they dealt for it (a deal into a pool,
// a send envelope created or skipped, each naming the campaign), so that a
// restart deals exactly what was not durably dealt, never an envelope twice.
const (
	RecStarted   uint8 = 16 // id u32, kind u8, rate u64, total u64, min u32, max u32, recipients u16, started i64
	RecCancelled uint8 = 17 // id u32, ended i64
	RecFinished  uint8 = 18 // id u32, ended i64
	// RecDealt is in a snapshot's part only, after an ended campaign's end:
	// what it dealt (id u32, n u64, amount u64). The SETs prune an ended
	// campaign's tally at a snapshot, so the runner keeps its figures.
	RecDealt uint8 = 19
)

// journalled is the runner's side of the journal: one producer, appended to
// by the admin API's goroutines and the dealing loop, hence its lock.
type journalled struct {
	mu sync.Mutex
	jp *journal.Producer
}

// record appends a record, makes the change it records (then, under the
// producer's lock: a snapshot sees both or neither), and with wait returns
// once the record is durable (the admin API answers only then). Without a
// journal it only makes the change.
func (jn *journalled) record(typ uint8, payload []byte, wait bool, then func()) error {
	jn.mu.Lock()
	defer jn.mu.Unlock()
	if jn.jp == nil {
		then()
		return nil
	}
	if jn.jp.Failed() {
		return ErrNotDurable
	}
	pos := jn.jp.Append(typ, payload)
	then()
	jn.jp.Publish()
	if !wait {
		return nil
	}
	if err := jn.jp.Wait(pos); err != nil {
		return ErrNotDurable
	}
	return nil
}

// Journal makes the runner journal its campaigns' starts, cancellations and
// ends to jp; nil leaves it off. Call it before any Start.
func (r *Runner) Journal(jp *journal.Producer) { r.jn.jp = jp }

func startedRecord(c *Campaign) []byte {
	p := c.Params
	b := binary.BigEndian.AppendUint32(nil, uint32(c.ID))
	b = append(b, kindByte(p.Kind))
	b = binary.BigEndian.AppendUint64(b, p.Rate)
	b = binary.BigEndian.AppendUint64(b, p.Total)
	b = binary.BigEndian.AppendUint32(b, p.Min)
	b = binary.BigEndian.AppendUint32(b, p.Max)
	b = binary.BigEndian.AppendUint16(b, p.Recipients)
	return binary.BigEndian.AppendUint64(b, uint64(c.Started.UnixNano()))
}

func endRecord(id int, at time.Time) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(nil, uint32(id)), uint64(at.UnixNano()))
}

func kindByte(k Kind) byte {
	if k == Send {
		return 1
	}
	return 0
}

// Snapshot writes the campaigns' starts and ends as records (the runner's
// part of snapshot id) and marks the runner's journal there: a replay from
// the snapshot reads them, then the runner's records after the mark. It
// returns the part with the mark's producer and position.
func (r *Runner) Snapshot(id uint64) (data []byte, pid uint16, pos uint64, ok bool) {
	r.mu.Lock() // no campaign starts meanwhile
	defer r.mu.Unlock()
	r.jn.mu.Lock() // none ends: its end and its record are made under this lock
	defer r.jn.mu.Unlock()
	if r.jn.jp == nil {
		return nil, 0, 0, false
	}
	for _, c := range slices.Concat(r.finished, r.running) {
		data = journal.AppendRecord(data, RecStarted, 0, startedRecord(c))
		st := c.status(r.local)
		switch st.State {
		case Cancelled:
			data = journal.AppendRecord(data, RecCancelled, 0, endRecord(c.ID, st.Ended))
		case Finished:
			data = journal.AppendRecord(data, RecFinished, 0, endRecord(c.ID, st.Ended))
		}
		if st.Done {
			d := binary.BigEndian.AppendUint32(nil, uint32(c.ID))
			d = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(d, st.Dealt), st.Amount)
			data = journal.AppendRecord(data, RecDealt, 0, d)
		}
	}
	pos = r.jn.jp.Mark(id)
	r.jn.jp.Publish()
	return data, r.jn.jp.ID(), pos, true
}

// Load reads the runner's part of a snapshot.
func (rc *Recovered) Load(data []byte) error {
	for len(data) > 0 {
		rec, n, err := journal.Decode(data)
		if err != nil {
			return fmt.Errorf("campaign: snapshot part: %w", err)
		}
		if err := rc.Apply(rec); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Recovered is what the runner's journal holds of the campaigns.
type Recovered struct {
	byID map[uint32]*recovered
}

type recovered struct {
	st   Status
	seen bool // its start record was read
	// endedN, endedAmount: its RecDealt, what it had dealt when it ended
	// (the SETs may have forgotten their shares since)
	endedN, endedAmount uint64
	hasEnded            bool
}

// NewRecovered starts an empty recovery.
func NewRecovered() *Recovered { return &Recovered{byID: map[uint32]*recovered{}} }

func (rc *Recovered) get(id uint32) *recovered {
	c := rc.byID[id]
	if c == nil {
		c = &recovered{}
		rc.byID[id] = c
	}
	return c
}

// Campaigns is how many campaigns were recovered.
func (rc *Recovered) Campaigns() int { return len(rc.byID) }

// Apply reads one of the runner's own records.
func (rc *Recovered) Apply(r journal.Record) error {
	p := r.Payload
	switch r.Type {
	case RecStarted:
		if len(p) != 4+1+8+8+4+4+2+8 {
			return fmt.Errorf("campaign: a start record of %d bytes", len(p))
		}
		c := rc.get(binary.BigEndian.Uint32(p))
		kind := Shake
		if p[4] == 1 {
			kind = Send
		}
		c.seen = true
		c.st.ID = int(binary.BigEndian.Uint32(p))
		c.st.Params = Params{Kind: kind, Rate: binary.BigEndian.Uint64(p[5:]), Total: binary.BigEndian.Uint64(p[13:]),
			Min: binary.BigEndian.Uint32(p[21:]), Max: binary.BigEndian.Uint32(p[25:]), Recipients: binary.BigEndian.Uint16(p[29:])}
		c.st.Started = time.Unix(0, int64(binary.BigEndian.Uint64(p[31:])))
		c.st.State = Running
	case RecDealt:
		if len(p) != 20 {
			return fmt.Errorf("campaign: a dealt record of %d bytes", len(p))
		}
		c := rc.get(binary.BigEndian.Uint32(p))
		c.endedN, c.endedAmount, c.hasEnded = binary.BigEndian.Uint64(p[4:]), binary.BigEndian.Uint64(p[12:]), true
	case RecCancelled, RecFinished:
		if len(p) != 12 {
			return fmt.Errorf("campaign: an end record of %d bytes", len(p))
		}
		c := rc.get(binary.BigEndian.Uint32(p))
		if r.Type == RecCancelled {
			c.st.State = Cancelled
		} else {
			c.st.State = Finished
		}
		c.st.Ended = time.Unix(0, int64(binary.BigEndian.Uint64(p[4:])))
	}
	return nil
}

// Restore gives the runner the campaigns recovered: the cancelled and the
// finished ones are listed as ended, the others run, each SET's share from
// what the SET durably dealt of it (Adopt). Call it before Start, then
// Adopt each SET, before serving.
func (r *Runner) Restore(rc *Recovered) error {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(rc.byID)) {
		rcv := rc.byID[id]
		if !rcv.seen {
			continue // an end of a campaign whose start a snapshot no longer holds
		}
		st := rcv.st
		r.nextID = max(r.nextID, st.ID)
		c := &Campaign{ID: st.ID, Params: st.Params, Started: st.Started, parts: make([]*part, len(r.dealtTo)), local: r.local}
		r.byID[c.ID] = c
		if st.State == Running {
			r.running = append(r.running, c)
			continue
		}
		ended := st.Ended
		if ended.IsZero() {
			ended = now
		}
		c.finalN, c.finalAmount, c.hasFinal, c.recorded = rcv.endedN, rcv.endedAmount, rcv.hasEnded, rcv.hasEnded
		c.ended.Store(ended.UnixNano())
		c.state.Store(uint32(slices.Index(states[:], st.State)))
		r.finished = append(r.finished, c)
	}
	return nil
}
