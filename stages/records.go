package stages

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hongbao-io/hongbao/journal"
)

// The journal records of the stages: each a change of a SET's state, written
// by the stage that owns that state (shake: the pool; split: the group
// envelopes), so that one producer's order is the order of the changes.
// Payloads are big-endian.
const (
	RecDeal   uint8 = 1 // shake: campaign u32, first id u64, amounts n × u32 (ids first..first+n-1 into the pool)
	RecPop    uint8 = 2 // shake: id u64, amount u32 (the pool's head, handed to a SHAKE)
	RecReturn uint8 = 3 // shake: id u64, amount u32 (back into the pool: the answer was not written)
	RecCreate uint8 = 4 // split: id u64, campaign u32, sender u32, total u32, expires i64, recipients n × u32
	RecDraw   uint8 = 5 // split: id u64, user u32, share u32
	RecUnopen uint8 = 6 // split: id u64, user u32, share u32 (the answer never reached the user: the share is back)
	RecRefund uint8 = 7 // split: id u64 (expired: its remainder refunded, the envelope forgotten)
	RecForget uint8 = 8 // split: id u64 (fully opened and past its retention, or evicted for room)
	RecSkip   uint8 = 9 // split: campaign u32, total u32 (a send campaign's envelope not created: no recipients, or no room)
	// RecDrawCrossed is RecDraw for an OPEN from another gateway, with its
	// crossing: the cancel of that crossing, which may reach whichever
	// gateway runs the SET by then, takes the share back.
	RecDrawCrossed uint8 = 10 // split: id u64, user u32, share u32, crossing u32
	// RecCrossing changes the crossings that told user's share drawn by a
	// crossing: told 1, one more told it ("already"); told 0, one of them
	// was cancelled and the others keep the share drawn.
	RecCrossing uint8 = 11 // split: id u64, user u32, crossing u32, told u32
	// The records of money changes made for a request with a request id
	// carry it: a retry with the same id is answered from them after a
	// restart, a move or a failover (docs/PROTOCOL.md, Request ids).
	RecPopReq    uint8 = 12 // shake: id u64, amount u32, user u32, req u64 (a RecPop for user's SHAKE req)
	RecCreateReq uint8 = 13 // split: req u64, then a RecCreate's payload (the sender's SEND req)
	RecDrawReq   uint8 = 14 // split: id u64, user u32, share u32, req u64 (a RecDraw for user's OPEN req)
)

var errRecord = errors.New("malformed record")

func recordError(r journal.Record, what string) error {
	return fmt.Errorf("stages: replaying record type %d of producer %d: %s: %w", r.Type, r.PID, what, errRecord)
}

func appendID(b []byte, id uint64, a, c uint32) []byte {
	b = binary.BigEndian.AppendUint64(b, id)
	b = binary.BigEndian.AppendUint32(b, a)
	return binary.BigEndian.AppendUint32(b, c)
}
