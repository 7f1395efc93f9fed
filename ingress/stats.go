package ingress

import (
	"sync/atomic"

	"github.com/hongbao-io/hongbao/proto"
)

// Stats is a snapshot of an Ingress's counters, summed over its loops. Every
// field counts up from New.
//
// The loops never add to a shared counter: each keeps plain counters of its
// own, adds them once per round into its padded shard of atomics, and Stats
// sums the shards when asked. The admin layer calls Stats at scrape time, so
// the cost of metrics is paid per scrape, not per frame.
type Stats struct {
	Accepted      uint64 // connections accepted (Refused not included)
	Refused       uint64 // connections closed at accept because MaxConns were open
	AcceptErrors  uint64 // accept failures other than "nothing to accept" (EMFILE, …)
	Closed        uint64 // connections whose end the ingress saw: EOF, error, or its own close
	Logins        uint64 // LOGINs accepted (KLogin published, or answered in Bare)
	LoginRejected uint64 // LOGIN_ACK 1 or 2, or ERROR 3 for a frame before LOGIN
	LoginTimeouts uint64 // ERROR 7
	Violations    uint64 // malformed, unknown or too large frames, and second LOGINs
	BytesIn       uint64
	Reads         uint64 // read syscalls
	Stalls        uint64 // times a connection stopped for a full ring (its input kept)
	Stamped       uint64 // reads made with the kernel's receive timestamp: only while a request may wait near Options.ShedDelay
	ChatLimited   uint64 // CHATs over their connection's rate (Options.ChatRate): CHAT_ACK 3
	SentAway      uint64 // connections told ERROR 9 at a request while their gateway was fenced (event.Bus.SetFenced)

	Frames   RequestCounts // well-formed frames decoded, by type
	Overload RequestCounts // "overloaded" answers: SHAKE_RESULT 2, OPEN_RESULT 5, SEND_ACK 2, CHAT_ACK 2, for a full ring or by delay
	Shed     RequestCounts // the part of Overload refused by delay (Options.ShedDelay): SHAKE and CHAT only
}

// RequestCounts counts something per client-to-server frame type.
type RequestCounts struct {
	Login, Shake, Open, Send, Chat, Ping uint64
}

// Of returns the count for t, or 0 when t is not a request type.
func (r *RequestCounts) Of(t proto.Type) uint64 {
	if p := r.field(t); p != nil {
		return *p
	}
	return 0
}

func (r *RequestCounts) field(t proto.Type) *uint64 {
	switch t {
	case proto.Login:
		return &r.Login
	case proto.Shake:
		return &r.Shake
	case proto.Open:
		return &r.Open
	case proto.Send:
		return &r.Send
	case proto.Chat:
		return &r.Chat
	case proto.Ping:
		return &r.Ping
	}
	return nil
}

// Counter indexes; framesIn, overload and shed are followed by one slot per type.
const (
	cAccepted = iota
	cRefused
	cAcceptErrors
	cClosed
	cLogins
	cLoginRejected
	cLoginTimeouts
	cViolations
	cBytesIn
	cReads
	cStalls
	cStamped
	cChatLimited
	cSentAway
	cFramesIn
	cOverload = cFramesIn + int(proto.Ping) + 1
	cShed     = cOverload + int(proto.Ping) + 1
	nCounters = cShed + int(proto.Ping) + 1
)

// counters is what one loop (or netpoll goroutine) counted since its last
// flush. Owned by that goroutine: plain adds.
type counters [nCounters]uint64

// shard is one loop's published counters, alone on its cache lines (128
// bytes: x86 prefetches 64-byte lines in pairs), so that a loop's flush does
// not invalidate its neighbour's.
type shard struct {
	c [nCounters]atomic.Uint64
	_ [128]byte
}

// flush adds what c counted into sh and zeroes c. In epoll mode only sh's
// loop calls it; netpoll's goroutines share their shard, hence Add rather
// than a load and a store.
func (c *counters) flush(sh *shard) {
	for i, v := range c {
		if v != 0 {
			sh.c[i].Add(v) // visible to Stats from here
			c[i] = 0
		}
	}
}

func (s *Stats) add(sh *shard) {
	v := func(i int) uint64 { return sh.c[i].Load() }
	s.Accepted += v(cAccepted)
	s.Refused += v(cRefused)
	s.AcceptErrors += v(cAcceptErrors)
	s.Closed += v(cClosed)
	s.Logins += v(cLogins)
	s.LoginRejected += v(cLoginRejected)
	s.LoginTimeouts += v(cLoginTimeouts)
	s.Violations += v(cViolations)
	s.BytesIn += v(cBytesIn)
	s.Reads += v(cReads)
	s.Stalls += v(cStalls)
	s.Stamped += v(cStamped)
	s.ChatLimited += v(cChatLimited)
	s.SentAway += v(cSentAway)
	for t := proto.Login; t <= proto.Ping; t++ {
		*s.Frames.field(t) += v(cFramesIn + int(t))
		*s.Overload.field(t) += v(cOverload + int(t))
		*s.Shed.field(t) += v(cShed + int(t))
	}
}
