package stages

import (
	"encoding/binary"
	"errors"
	"fmt"

	"hongbao/journal"
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
)

// CampaignProgress decodes what a record dealt for a campaign: n envelopes
// of amount fen in all (amounts for shake, totals for send); ok false for
// records that deal nothing for one.
func CampaignProgress(r journal.Record) (campaign uint32, n, amount uint64, ok bool) {
	p := r.Payload
	switch r.Type {
	case RecDeal:
		if len(p) < 12 || (len(p)-12)%4 != 0 {
			return 0, 0, 0, false
		}
		for i := 12; i < len(p); i += 4 {
			amount += uint64(binary.BigEndian.Uint32(p[i:]))
		}
		return binary.BigEndian.Uint32(p), uint64(len(p)-12) / 4, amount, true
	case RecCreate:
		if len(p) < 28 {
			return 0, 0, 0, false
		}
		return binary.BigEndian.Uint32(p[8:]), 1, uint64(binary.BigEndian.Uint32(p[16:])), true
	case RecSkip:
		if len(p) < 8 {
			return 0, 0, 0, false
		}
		return binary.BigEndian.Uint32(p), 1, uint64(binary.BigEndian.Uint32(p[4:])), true
	}
	return 0, 0, 0, false
}

var errRecord = errors.New("malformed record")

func recordError(r journal.Record, what string) error {
	return fmt.Errorf("stages: replaying record type %d of producer %d: %s: %w", r.Type, r.PID, what, errRecord)
}

func appendID(b []byte, id uint64, a, c uint32) []byte {
	b = binary.BigEndian.AppendUint64(b, id)
	b = binary.BigEndian.AppendUint32(b, a)
	return binary.BigEndian.AppendUint32(b, c)
}

// DealLastID is the last envelope id of a RecDeal record, or 0.
func DealLastID(r journal.Record) uint64 {
	if r.Type != RecDeal || len(r.Payload) < 16 {
		return 0
	}
	return binary.BigEndian.Uint64(r.Payload[4:]) + uint64(len(r.Payload)-12)/4 - 1
}
