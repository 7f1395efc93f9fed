// Package event defines what travels through a SET's ring: the fixed-size
// Event that producers fill in place, its Kinds, and the Bus that routes an
// event to the ring of the SET that owns its work. It does no I/O and holds
// no business state: what an event means is the stages'.
package event

import (
	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/ring"
)

// Kind says what an Event asks of its SET.
type Kind uint8

const (
	_ Kind = iota
	// From ingress, for requests (Conn: the requester; Stamp; RecvNs).
	KLogin // → the user's SET. User (ingress answers rejected logins itself, before any SET)
	KShake // → the user's SET
	KOpen  // → the envelope's owner SET. Env; User: the opener
	KSend  // → the sender's SET. Total, N; Buf: n × recipient u32 BE
	KChat  // → the recipient's SET. Peer: recipient; Buf: the CHAT_DELIVER frame, ready to write
	KPing  // → the user's SET
	// From ingress, for connections.
	KFatal      // → the user's SET: write ERROR Code to Conn, then cut it off
	KWritable   // → Conn's SET: its socket is writable again
	KDisconnect // → Conn's SET: the peer closed; egress releases Conn

	// Between stages and SETs.
	KAnswer     // → Conn's SET: write Out to Conn (an answer made in another SET); or Buf: answers the ingress refused "overloaded", one after another
	KPush       // → User's SET: write Out (the ENVELOPE of Env) to User's connection, or keep it for User's next login; Status PushUndelivered: egress could not write it to Conn
	KDeal       // campaign → SET: N shake envelopes, ids Env..Env+N-1; Buf: N × amount u32 BE
	KReturn     // egress → its own SET: shake envelope Env of Amount goes back to the pool
	KSystemSend // campaign → SET: a system group envelope of Total fen, N recipients picked in this SET
	KTick       // timer → SET: nothing to do but retry what a stage holds back
	KShutdown   // server → SET: egress sends ERROR 8 (or Code) to every connection of the SET and cuts it off
	KRetired17  // an earlier version's take-back of an OPEN share (never sent now; dropped if received): its number is kept, for the kinds after it cross between gateways
	KCutOff     // egress → its own SET: User's connection Conn is cut off (ERROR 6): the session forgets it now, not when it is released
	KRepush     // session → the envelope's SET: User logged in with an ENVELOPE push of Env pending; push it again if User may still open it
	KSnapshot   // server → SET: the shake and split stages write their state for snapshot Env and mark their journal there; Buf: nil, then the shake stage's list of the campaigns whose shares ended (n × id u32 BE), whose tallies both prune; split puts it back
	KShare      // campaign → SET: the SET's share of campaign Peer taken (Status 1) or ended (2); Buf: the share's record (package stages)
)

// PushUndelivered is the Status of a KPush that egress sends back to the
// session: its ENVELOPE could not be written to Conn (gone, or cut off), so
// the session keeps it for the user's next login like a push to someone
// offline.
const PushUndelivered uint8 = 1

var kindNames = [...]string{"", "login", "shake", "open", "send", "chat", "ping", "fatal", "writable",
	"disconnect", "answer", "push", "deal", "return", "system_send", "tick", "shutdown", "retired", "cut_off", "repush", "snapshot", "share"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// OutCap is the largest fixed-size answer frame (ENVELOPE, 30 bytes), rounded up.
const OutCap = 32

// Event is one slot of a SET's ring. Producers fill it in place; each stage
// reads it and may add what downstream stages need (the frame to write, a
// resolved connection). Nothing in it is allocated per event: Buf is pooled
// and released by the stage that consumes it last.
type Event struct {
	Kind   Kind
	Status uint8  // answer status decided upstream
	Code   uint8  // ERROR code for KFatal, and KShutdown's when not 8
	OutLen uint8  // bytes of Out in use
	N      uint16 // count: SEND recipients, deal size, shares
	JPID   uint16 // with JPos: the journal producer whose record the answer reports
	User   uint32 // the user the event is about
	Peer   uint32 // the other user: chat recipient, envelope sender; the campaign of a KDeal or KSystemSend
	Amount uint32
	Total  uint32
	Conn   conn.Handle // the connection answers go to
	Conn2  conn.Handle // a second connection: the recipient of a chat, the one a LOGIN replaces
	Stamp  uint64      // the request's stamp, echoed in its answer
	JPos   uint64      // a money answer leaves only once journal producer JPID is durable up to here; 0: at once
	Env    uint64      // envelope id
	RecvNs int64       // unix ns when the ingress's loop began the chunk of reads that read the request: latency is measured from it
	Buf    *bytebufferpool.ByteBuffer
	Out    [OutCap]byte // the answer frame, encoded by the stage that decided it
}

// Req returns the request id of a KShake, KOpen or KSend (0: none;
// docs/PROTOCOL.md, Request ids). It rides in fields those requests leave
// free, so that the slot stays two cache lines: Peer:Total for a SHAKE or an
// OPEN (their answers fill Env and Amount, and egress still reads the id of
// a SHAKE's), Peer:Amount for a SEND (whose Total is the envelope's).
func (e *Event) Req() uint64 {
	if e.Kind == KSend {
		return uint64(e.Peer)<<32 | uint64(e.Amount)
	}
	return uint64(e.Peer)<<32 | uint64(e.Total)
}

// SetReq stores request id id in a KShake, KOpen or KSend: set Kind first.
func (e *Event) SetReq(id uint64) {
	e.Peer = uint32(id >> 32)
	if e.Kind == KSend {
		e.Amount = uint32(id)
	} else {
		e.Total = uint32(id)
	}
}

// Frame returns the encoded answer held in Out.
func (e *Event) Frame() []byte { return e.Out[:e.OutLen] }

// SetFrame stores an encoded frame of at most OutCap bytes in Out. The append
// helpers of package proto write straight into e.Out[:0], so SetFrame only
// records the length.
func (e *Event) SetFrame(b []byte) { e.OutLen = uint8(len(b)) }

// Ring is a SET's ring.
type Ring = ring.Ring[Event]

// Batch is a batch of a SET's ring.
type Batch = ring.Batch[Event]
