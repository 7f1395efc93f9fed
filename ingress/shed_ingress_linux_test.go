package ingress_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/proto"
)

// skewClock is an Options.Now that runs with the real clock plus a skew the
// test sets: each read then looks as if it had waited that much longer in
// the socket. Differences of the clock (rounds, intervals) stay real.
type skewClock struct{ skew atomic.Int64 }

func (c *skewClock) now() int64 { return time.Now().UnixNano() + c.skew.Load() }

// shedUser is a logged-in test client that numbers its frames 1, 2, 3, …
type shedUser struct {
	*client
	user, peer uint32 // peer: a user of the same SET, for CHAT and SEND
	set        int
	stamp      uint64
	env        uint64 // a group envelope id that the user's SET owns
}

func (u *shedUser) next() uint64 { u.stamp++; return u.stamp }

func (u *shedUser) shake() []byte { return proto.AppendShake(nil, u.next()) }
func (u *shedUser) ping() []byte  { return proto.AppendPing(nil, u.next()) }
func (u *shedUser) chat() []byte  { return proto.AppendChat(nil, u.next(), u.peer, []byte("hi")) }
func (u *shedUser) open() []byte  { return proto.AppendOpen(nil, u.next(), u.env) }
func (u *shedUser) sendEnv() []byte {
	return proto.AppendSend(nil, u.next(), 10, []uint32{u.peer})
}

// TestShedByDelay: with ShedDelay set, requests that waited longer than it
// in the socket, round after round, get SHAKE_RESULT 2 and CHAT_ACK 2 at
// once, each in its place among the connection's other answers (by stamp),
// none lost or doubled; LOGIN, PING, OPEN and SEND are never refused; and
// what waited less is served, before the shedder arms and after. The waits
// come from a skewed clock and from stalling the loops for real; the
// assertions are on counts and on lower bounds of time only.
func TestShedByDelay(t *testing.T) {
	const target = 200 * time.Millisecond
	bus, recs := newBus(t, 2, 1024, 4)
	var clk skewClock
	ing := serve(t, ingress.Options{Mode: ingress.ModeEpoll, Bus: bus, ShedDelay: target, Now: clk.now})

	var users []*shedUser
	for _, uid := range []uint32{2, 4, 3, 5} { // SET 0: 2, 4; SET 1: 3, 5
		set := bus.SETOf(uid)
		gen, err := envelope.NewGroupIDGen(set, time.Now().UnixNano())
		if err != nil {
			t.Fatal(err)
		}
		u := &shedUser{user: uid, peer: uid ^ 6, set: set, env: gen.Next()} // 2↔4, 3↔5
		u.client, _ = login(t, ing, recs[set], uid, u.next())
		users = append(users, u)
	}
	var others uint64 // frames of other clients
	sent := func() uint64 {
		n := others
		for _, u := range users {
			n += u.stamp
		}
		return n
	}
	frames := func(s ingress.Stats) uint64 { return sum(s.Frames) }
	waitHandled := func(what string) ingress.Stats {
		t.Helper()
		want := sent()
		return waitStats(t, ing, what, func(s ingress.Stats) bool { return frames(s) == want })
	}

	// Within the bound: nothing is refused.
	for range 10 {
		for _, u := range users {
			u.send(u.shake(), u.shake(), u.ping(), u.chat())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := waitHandled("the frames within the bound")
	if sum(s.Overload) != 0 || sum(s.Shed) != 0 {
		t.Fatalf("within the bound: overload %+v, shed %+v; want none", s.Overload, s.Shed)
	}
	t.Logf("within the bound: %d reads, %d of them timestamped", s.Reads, s.Stamped)

	// Every read now looks 10 s late: after 2 × target of such rounds the
	// shedder of each loop arms, and not before.
	refused := func(u *shedUser) bool {
		for _, x := range recs[u.set].events() {
			if x.ev.User == u.user && x.ev.Kind == event.KAnswer {
				return true
			}
		}
		return false
	}
	clk.skew.Store(int64(10 * time.Second))
	start := time.Now()
	var armed time.Duration
	for slices.ContainsFunc(users, func(u *shedUser) bool { return !refused(u) }) {
		if time.Since(start) > waitTime {
			t.Fatal("the shedder did not arm")
		}
		if armed == 0 && ing.Stats().Shed.Shake > 0 {
			armed = time.Since(start)
		}
		for _, u := range users {
			u.send(u.shake())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if armed == 0 {
		armed = time.Since(start)
	}
	if armed < 2*target {
		t.Errorf("armed after %v; want no sooner than 2 × %v", armed, target)
	}
	t.Logf("armed after %v of late reads (interval %v)", armed, 2*target)
	s = waitHandled("the frames while arming")

	// Armed: every SHAKE and CHAT of a late read is refused, the rest served.
	before := s
	for _, u := range users {
		u.send(u.shake(), u.shake(), u.ping(), u.chat(), u.open(), u.shake(), u.sendEnv(), u.shake())
	}
	late := dial(t, ing) // a LOGIN is never refused
	late.send(loginFrame(77, 6))
	late.expect(proto.LoginAck, 77)
	others++
	s = waitHandled("the late frames")
	if got := s.Shed.Shake - before.Shed.Shake; got != 4*4 {
		t.Errorf("late SHAKEs shed: %d; want %d", got, 4*4)
	}
	if got := s.Shed.Chat - before.Shed.Chat; got != 4 {
		t.Errorf("late CHATs shed: %d; want %d", got, 4)
	}

	// The loops stall for real, with the clock right again: what was sent
	// meanwhile waited over the target, and is refused once they go on.
	clk.skew.Store(0)
	release := ing.StallLoops()
	before = ing.Stats()
	for _, u := range users {
		u.send(u.shake(), u.ping(), u.shake())
	}
	// Past the target, short of the 2 × target that rounds under it (one
	// may run before the stall) need to disarm the shedder.
	time.Sleep(target + target/2)
	release()
	s = waitHandled("the frames sent during the stall")
	if got := s.Shed.Shake - before.Shed.Shake; got != 2*4 {
		t.Errorf("SHAKEs shed after a stall while armed: %d; want %d", got, 2*4)
	}

	// Fresh requests are served, armed or not.
	before = s
	for range 10 {
		for _, u := range users {
			u.send(u.shake(), u.chat(), u.ping())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s = waitHandled("the fresh frames")
	if got := sum(s.Shed) - sum(before.Shed); got != 0 {
		t.Errorf("fresh requests shed: %d; want 0", got)
	}
	if s.Overload != s.Shed {
		t.Errorf("overload %+v; want exactly the shed ones %+v (no ring was full)", s.Overload, s.Shed)
	}

	// Each user's frames became events in its SET's ring in the order it
	// sent them, each once: the refused ones in KAnswer batches.
	var refusedShakes, refusedChats uint64
	for _, u := range users {
		var got []uint64
		for _, x := range recs[u.set].events() {
			if x.ev.User != u.user {
				continue
			}
			switch x.ev.Kind {
			case event.KLogin, event.KShake, event.KPing, event.KChat, event.KOpen, event.KSend:
				got = append(got, x.ev.Stamp)
			case event.KAnswer:
				for b := x.buf; len(b) > 0; {
					f, n, err := proto.NextResponse(b)
					if err != nil || n == 0 {
						t.Fatalf("user %d: a bad refusal batch %x", u.user, x.buf)
					}
					switch {
					case f.Type == proto.ShakeResult && f.Body[0] == proto.ShakeOverloaded:
						refusedShakes++
					case f.Type == proto.ChatAck && f.Body[0] == proto.ChatOverloaded:
						refusedChats++
					default:
						t.Errorf("user %d: refused with %v status %d", u.user, f.Type, f.Body[0])
					}
					got, b = append(got, f.Stamp), b[n:]
				}
			}
		}
		want := make([]uint64, u.stamp)
		for i := range want {
			want[i] = uint64(i + 1)
		}
		if !slices.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Errorf("user %d: %d stamps in ring order, from the %dth on %v; want 1..%d in order, each once",
				u.user, len(got), i+1, got[i:min(i+8, len(got))], u.stamp)
		}
	}
	if refusedShakes != s.Shed.Shake || refusedChats != s.Shed.Chat {
		t.Errorf("refusals in the rings: %d SHAKE, %d CHAT; counted %d, %d", refusedShakes, refusedChats, s.Shed.Shake, s.Shed.Chat)
	}
	t.Logf("shed %d SHAKEs, %d CHATs; %d reads, %d timestamped", s.Shed.Shake, s.Shed.Chat, s.Reads, s.Stamped)
}

// TestShedBurst: a loop stalled for longer than the target once, with no
// standing queue before or after, serves everything late rather than refuse
// it: one late round does not arm the shedder.
func TestShedBurst(t *testing.T) {
	const target = 50 * time.Millisecond
	bus, recs := newBus(t, 1, 1024, 4)
	ing := serve(t, ingress.Options{Mode: ingress.ModeEpoll, Bus: bus, ShedDelay: target})
	c, _ := login(t, ing, recs[0], 1, 1)
	release := ing.StallLoops()
	var b []byte
	for i := range uint64(100) {
		b = proto.AppendShake(b, 2+i)
	}
	c.send(b)
	time.Sleep(3 * target)
	release()
	s := waitStats(t, ing, "the SHAKEs", func(s ingress.Stats) bool { return s.Frames.Shake == 100 })
	if s.Stamped == 0 {
		t.Errorf("no read was timestamped after a stall of %v", 3*target)
	}
	if sum(s.Overload) != 0 {
		t.Errorf("overload %+v after one late round; want none", s.Overload)
	}
}
