package stages

import (
	"time"

	"github.com/hongbao-io/hongbao/ledger"
)

// senders is the SEND state of the users of one SET, owned by its split
// stage: a token bucket per user for the SEND rate, and the count of the
// user's live group envelopes for the per-user cap.
//
// The bucket is kept as GCRA's theoretical arrival time (tat): a SEND at
// now is allowed while tat − now ≤ (burst − 1)·interval, and moves tat to
// max(tat, now) + interval. A bucket whose tat has passed is full, exactly
// like a user never seen, so it is forgotten then, not before: a user who
// reconnects gets back the bucket it left, and only time refills it.
//
// Bounded: a user has an entry only while its bucket is not full (at most
// burst/rate after its last SEND: 2 s by default) or it has live envelopes,
// so the entries are at most the SENDs accepted in the last burst/rate plus
// the SET's live envelopes (its budget). Each costs ~30 bytes of map.
type senders struct {
	users     map[uint32]sender
	interval  int64 // ns per token; 0: no rate limit
	tolerance int64 // (burst − 1)·interval: how far tat may run ahead of now
	refill    int64 // burst·interval: after this since its last SEND, a bucket is full
	trackLive bool  // a per-user cap is set: count each user's live envelopes
	full      []fullAt
	head      int // full[head:] are pending
	c         *ledger.SplitCounters
}

type sender struct {
	tat  int64 // unix ns; ≤ now: the bucket is full
	live int32 // live group envelopes the user sent
}

// fullAt says that user's bucket is full at the latest at, unless it was
// charged again since (then a later fullAt names it).
type fullAt struct {
	user uint32
	at   int64
}

func newSenders(lim Limits, c *ledger.SplitCounters) senders {
	s := senders{users: make(map[uint32]sender), trackLive: lim.MaxLive > 0, c: c}
	if lim.SendRate > 0 {
		burst := int64(max(lim.SendBurst, 1))
		s.interval = max(int64(float64(time.Second)/lim.SendRate), 1)
		s.tolerance = (burst - 1) * s.interval
		s.refill = burst * s.interval
	}
	return s
}

// allowed reports whether user's bucket holds a token at now.
func (s *senders) allowed(user uint32, now int64) bool {
	if s.interval == 0 {
		return true
	}
	e, ok := s.users[user]
	return !ok || max(e.tat, now)-now <= s.tolerance
}

// charge takes a token from user's bucket (allowed said it holds one).
func (s *senders) charge(user uint32, now int64) {
	if s.interval == 0 {
		return
	}
	e, ok := s.users[user]
	if !ok {
		s.c.Senders.Add(1)
	}
	e.tat = max(e.tat, now) + s.interval
	s.users[user] = e
	s.full = append(s.full, fullAt{user, now + s.refill})
}

// live is the number of user's live envelopes (0 unless a cap is set).
func (s *senders) live(user uint32) int { return int(s.users[user].live) }

// addLive counts one more (delta 1) or one fewer (−1) live envelope of user.
func (s *senders) addLive(user uint32, delta int, now int64) {
	if !s.trackLive {
		return
	}
	e, ok := s.users[user]
	e.live += int32(delta)
	switch {
	case e.live <= 0 && e.tat <= now:
		if ok {
			delete(s.users, user)
			s.c.Senders.Add(-1)
		}
	default:
		if !ok {
			s.c.Senders.Add(1)
		}
		s.users[user] = e
	}
}

// evict forgets the users whose buckets have filled up since and who have
// no live envelope: they are indistinguishable from users never seen.
// Amortised O(1) per SEND charged.
func (s *senders) evict(now int64) {
	i := s.head
	for ; i < len(s.full) && s.full[i].at <= now; i++ {
		u := s.full[i].user
		if e, ok := s.users[u]; ok && e.live <= 0 && e.tat <= now {
			delete(s.users, u)
			s.c.Senders.Add(-1)
		}
	}
	s.head = i
	// Reclaim the consumed head once it is most of the slice, so that the
	// queue stays within twice the SENDs of the last refill period.
	if s.head > 64 && s.head > len(s.full)/2 {
		n := copy(s.full, s.full[s.head:])
		s.full = s.full[:n]
		s.head = 0
	}
}
