package stages

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
)

// Share is a SET's share of a campaign: what the SET deals of it (its part
// of the rate and the total, the envelopes' amounts, a send envelope's
// recipients) and, once the share ended — dealt in full or cancelled — what
// it dealt. It is the SET's own state, journalled and snapshotted with its
// pool, so that whichever gateway runs the SET deals what is left of it
// (package campaign).
type Share struct {
	Send       bool   // a send campaign's: system group envelopes; else shake envelopes
	Rate       uint64 // envelopes per second
	Total      uint64 // envelopes in all
	Min, Max   uint32 // amount (shake) or total (send) in fen, inclusive
	Recipients uint16 // send: shares per envelope
	Ended      bool
	N, Amount  uint64 // once Ended: the envelopes dealt and their amounts (send: totals)
}

// The share records, in the shake stage's journal.
const (
	RecShare    uint8 = 15 // campaign u32, send u8, rate u64, total u64, min u32, max u32, recipients u16
	RecShareEnd uint8 = 16 // campaign u32, dealt u64, amount u64
)

// KShare's ops (event Status).
const (
	ShareStart uint8 = 1 // Buf: a RecShare's payload
	ShareEnd   uint8 = 2 // Buf: a RecShareEnd's payload
)

// MaxEndedShares is how many ended shares a SET keeps, with what they
// dealt, the newest: GET /campaigns sums them; older ones are forgotten.
const MaxEndedShares = 1000

const shareStartLen, shareEndLen = 4 + 1 + 8 + 8 + 4 + 4 + 2, 4 + 8 + 8

// AppendShare appends the RecShare payload of campaign id's share sh.
func AppendShare(b []byte, id uint32, sh Share) []byte {
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(b, boolByte(sh.Send))
	b = binary.BigEndian.AppendUint64(b, sh.Rate)
	b = binary.BigEndian.AppendUint64(b, sh.Total)
	b = binary.BigEndian.AppendUint32(b, sh.Min)
	b = binary.BigEndian.AppendUint32(b, sh.Max)
	return binary.BigEndian.AppendUint16(b, sh.Recipients)
}

// AppendShareEnd appends the RecShareEnd payload of campaign id's share,
// ended having dealt n envelopes of amount fen.
func AppendShareEnd(b []byte, id uint32, n, amount uint64) []byte {
	b = binary.BigEndian.AppendUint32(b, id)
	b = binary.BigEndian.AppendUint64(b, n)
	return binary.BigEndian.AppendUint64(b, amount)
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// shares are a SET's shares of the campaigns. A share is taken once: a
// start for a share the SET holds, or for a campaign no later than the
// latest ended share it forgot, changes nothing, so that a campaign the SET
// ended is never dealt again.
type shares struct {
	m         map[uint32]*Share
	forgotten uint32 // the latest campaign whose ended share was forgotten
	ended     int
}

// start takes campaign id's share from payload p (a RecShare's) and
// reports whether it is new.
func (t *shares) start(p []byte) (bool, error) {
	id, sh, err := decodeShare(p)
	if err != nil || id <= t.forgotten || t.m[id] != nil {
		return false, err
	}
	t.put(id, sh)
	return true, nil
}

// decodeShare reads a RecShare's payload.
func decodeShare(p []byte) (uint32, *Share, error) {
	if len(p) != shareStartLen || p[4] > 1 || binary.BigEndian.Uint32(p) == 0 {
		return 0, nil, fmt.Errorf("a share of %d bytes", len(p))
	}
	return binary.BigEndian.Uint32(p), &Share{Send: p[4] == 1, Rate: binary.BigEndian.Uint64(p[5:]), Total: binary.BigEndian.Uint64(p[13:]),
		Min: binary.BigEndian.Uint32(p[21:]), Max: binary.BigEndian.Uint32(p[25:]), Recipients: binary.BigEndian.Uint16(p[29:])}, nil
}

func (t *shares) put(id uint32, sh *Share) {
	if t.m == nil {
		t.m = map[uint32]*Share{}
	}
	t.m[id] = sh
}

// end ends campaign id's share from payload p (a RecShareEnd's) and
// reports whether it was running.
func (t *shares) end(p []byte) (bool, error) {
	if len(p) != shareEndLen {
		return false, fmt.Errorf("a share's end of %d bytes", len(p))
	}
	sh := t.m[binary.BigEndian.Uint32(p)]
	if sh == nil || sh.Ended {
		return false, nil
	}
	sh.Ended, sh.N, sh.Amount = true, binary.BigEndian.Uint64(p[4:]), binary.BigEndian.Uint64(p[12:])
	if t.ended++; t.ended > MaxEndedShares {
		t.forgetOldest()
	}
	return true, nil
}

// forgetOldest forgets the ended share of the lowest campaign id.
func (t *shares) forgetOldest() {
	var oldest uint32
	for id, sh := range t.m {
		if sh.Ended && (oldest == 0 || id < oldest) {
			oldest = id
		}
	}
	delete(t.m, oldest)
	t.ended--
	t.forgotten = max(t.forgotten, oldest)
}

// appendEnded appends the ids of the ended shares (u32 BE each).
func (t *shares) appendEnded(b []byte) []byte {
	for id, sh := range t.m {
		if sh.Ended {
			b = binary.BigEndian.AppendUint32(b, id)
		}
	}
	return b
}

// sharesTag opens the shares' section of a shake part: a part of an earlier
// version has none.
const sharesTag uint32 = 0x73686172 // "shar"

func (t *shares) appendTo(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, sharesTag)
	b = binary.BigEndian.AppendUint32(b, t.forgotten)
	b = binary.BigEndian.AppendUint32(b, uint32(len(t.m)))
	for _, id := range slices.Sorted(maps.Keys(t.m)) {
		sh := t.m[id]
		b = AppendShare(b, id, *sh)
		b = append(b, boolByte(sh.Ended))
		b = binary.BigEndian.AppendUint64(b, sh.N)
		b = binary.BigEndian.AppendUint64(b, sh.Amount)
	}
	return b
}

func (t *shares) load(r *reader) error {
	if tag := r.u32(); r.err == nil && tag != sharesTag {
		return fmt.Errorf("stages: a shake part's shares open with %#x: %w", tag, errRecord)
	}
	t.forgotten = r.u32()
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		p := r.take(shareStartLen)
		if r.err != nil {
			break
		}
		id, sh, err := decodeShare(p)
		if err != nil || id <= t.forgotten || t.m[id] != nil {
			return fmt.Errorf("stages: a shake part's share of campaign %d (forgotten up to %d): broken, twice or forgotten: %w", id, t.forgotten, errRecord)
		}
		ended, dn, amount := r.take(1)[0], r.u64(), r.u64()
		if ended > 1 {
			return fmt.Errorf("stages: a shake part's share ended %d: %w", ended, errRecord)
		}
		if ended == 1 {
			sh.Ended, sh.N, sh.Amount = true, dn, amount
			t.ended++
		}
		t.put(id, sh)
	}
	return nil
}

// Campaigns is what a SET holds of the campaigns: its shares, what its
// stages dealt of each, and the ids the last dealt used.
type Campaigns struct {
	Shares map[uint32]Share
	// Forgotten: the SET takes no share of a campaign up to this id unless it
	// holds it: it ended and was forgotten.
	Forgotten   uint32
	Shake, Send map[uint32]Dealt // dealt for each campaign, by kind
	LastShake   uint64           // the last shake envelope id dealt
	Created     uint64           // shake envelopes dealt into the pool in all
}

// Campaigns reads what the SET holds of the campaigns (with the split
// stage's send tallies); call it only while the SET is stopped.
func (s *Shake) Campaigns(split *Split) Campaigns {
	c := Campaigns{Shares: make(map[uint32]Share, len(s.shares.m)), Forgotten: s.shares.forgotten,
		Shake: map[uint32]Dealt{}, Send: map[uint32]Dealt{}, LastShake: s.lastDealt, Created: s.c.Created.Load()}
	for id, sh := range s.shares.m {
		c.Shares[id] = *sh
	}
	for id, d := range s.camps {
		c.Shake[id] = *d
	}
	for id, d := range split.camps {
		c.Send[id] = *d
	}
	return c
}

// share applies a KShare: a campaign's share taken or ended, journalled
// when it changes the SET's shares; it reports whether it did.
func (s *Shake) share(ev *event.Event) bool {
	if ev.Buf == nil {
		return false
	}
	p := ev.Buf.B
	var changed bool
	var err error
	typ := RecShare
	switch ev.Status {
	case ShareStart:
		changed, err = s.shares.start(p)
	case ShareEnd:
		typ = RecShareEnd
		changed, err = s.shares.end(p)
	}
	if err != nil {
		panic("BUG: stages: a KShare that does not decode: " + err.Error())
	}
	if changed && s.jp != nil {
		s.jp.Append(typ, p)
	}
	bytebufferpool.Put(ev.Buf)
	ev.Buf = nil
	return changed
}

// restoreShare replays a share record.
func (s *Shake) restoreShare(r journal.Record) error {
	var err error
	if r.Type == RecShare {
		_, err = s.shares.start(r.Payload)
	} else {
		_, err = s.shares.end(r.Payload)
	}
	if err != nil {
		return recordError(r, err.Error())
	}
	return nil
}
