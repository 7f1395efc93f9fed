package loadclient_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/proto"
)

// fakeServer speaks enough of the protocol to drive the load client without the real
// server: a goroutine per connection, LOGIN_ACK 0, SHAKE_RESULT 1 with amounts from a
// counter, an ENVELOPE pushed to the shaker every pushEvery SHAKEs, OPEN_RESULT 0 with
// openAmount for an envelope pushed to the opener (1 when opened before, 2 when not its
// own), SEND_ACK 0 with pushes to the online recipients, CHAT_ACK and CHAT_DELIVER. Its
// /stats tells the totals it counted (and those of hold, money from before the run), got_amount
// less underReport once it has answered a SHAKE of the run. With loginStatus set it
// refuses every LOGIN with that status instead; with redirect set, a LOGIN of a user it says
// is owned elsewhere gets LOGIN_ACK 3 with the address it names, and the connection closes.
// move hands every user to another gateway, as a failover of its SETs. With openRule set, it
// decides how each OPEN is handled (openAct). A share, once drawn, is the user's: a later OPEN
// of it answers 1 with it.
type fakeServer struct {
	t           *testing.T
	ln          net.Listener
	admin       *httptest.Server
	pushEvery   int
	underReport int64

	mu           sync.Mutex
	loginStatus  uint8                                       // the LOGIN_ACK status for every LOGIN: LoginOK logs users in
	redirect     func(user uint32) (addr string, moved bool) // nil: every user is this gateway's
	redirected   map[uint32]int                              // LOGIN_ACK 3 by user
	loggedIn     map[uint32]int                              // LOGIN_ACK 0 by user
	conns        map[uint32]*fakeConn
	all          map[net.Conn]bool
	nextEnv      uint64
	heldShakes   int64 // of shakes, those of hold: answered before the run
	shakes       int64
	shakeAmount  int64
	shakesBy     map[uint32]int    // SHAKEs by user
	lastShake    time.Time         // when the last SHAKE came
	moved        int               // ERROR 9 sent
	byStampSec   map[int64]int     // SHAKEs by the second of their stamp
	pushed       map[[2]uint64]int // (user, envelope) → ENVELOPE pushes
	opened       map[[2]uint64]int // (user, envelope) → OPENs
	openedAt     map[[2]uint64][]time.Time
	drawn        map[[2]uint64]bool                           // (user, envelope) → its share drawn
	openRule     func(user uint32, env uint64, n int) openAct // the n-th OPEN (from 1) of env by user; nil: as usual
	openedOK     int64
	openedAmount int64
	sends        int64
	chats        int64
	logins       int64
	killed       bool
	peers        map[string]int // connections by the client's IP

	// Request ids, as the server keeps them: a SHAKE with the id of one answered before
	// gets that answer again, counted once. dropShakes: the first SHAKE of that many users
	// is counted and its connection closed before the answer, as by a kill.
	shakeIDs   map[uint32][]uint64     // the request ids of each user's SHAKEs, in order
	kept       map[[2]uint64][2]uint64 // (user, id) → (envelope, amount)
	dropShakes int
	dropped    map[uint32]bool
	replayed   int
}

const openAmount = 3

// openAct is how the fake handles one OPEN of an envelope pushed to the user; the zero value
// answers as usual: 0 with a share drawn now, 1 with the share drawn before.
type openAct struct {
	overload bool // answer 5: drawing the share first with draw, as a cluster whose crossing timed out
	draw     bool
	drop     uint8 // dropClose, dropMoved: draw the share and answer nothing; the connection ends
	again    bool  // after the answer, push the envelope again
}

// How a connection ends at an OPEN: closed (after the answers made before), or ERROR 9 first.
const (
	dropClose = 1 + iota
	dropMoved
)

type fakeConn struct {
	mu sync.Mutex
	nc net.Conn
}

func (c *fakeConn) write(b []byte) {
	c.mu.Lock()
	c.nc.Write(b)
	c.mu.Unlock()
}

func newFakeServer(t *testing.T, pushEvery int) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{
		t: t, ln: ln, pushEvery: pushEvery,
		conns: map[uint32]*fakeConn{}, all: map[net.Conn]bool{},
		byStampSec: map[int64]int{}, pushed: map[[2]uint64]int{}, opened: map[[2]uint64]int{},
		openedAt: map[[2]uint64][]time.Time{}, drawn: map[[2]uint64]bool{},
		peers: map[string]int{}, redirected: map[uint32]int{}, loggedIn: map[uint32]int{},
		shakesBy: map[uint32]int{},
		shakeIDs: map[uint32][]uint64{}, kept: map[[2]uint64][2]uint64{}, dropped: map[uint32]bool{},
	}
	s.admin = httptest.NewServer(http.HandlerFunc(s.stats))
	go s.accept()
	t.Cleanup(s.kill)
	return s
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

func (s *fakeServer) stats(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/stats" {
		http.NotFound(w, r)
		return
	}
	json.NewEncoder(w).Encode(s.figures().json())
}

// fakeStats are the figures of /stats the load client reads.
type fakeStats struct {
	connections, logins                     int
	shakes, gotAmount, opened, openedAmount int64
}

func (s *fakeServer) figures() fakeStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.shakeAmount
	if s.shakes > s.heldShakes {
		got -= s.underReport
	}
	return fakeStats{len(s.conns), int(s.logins), s.shakes, got, s.openedOK, s.openedAmount}
}

// hold makes s count money from before the run, as a server that served earlier runs.
func (s *fakeServer) hold(shakes, gotAmount, opened, openedAmount int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heldShakes += shakes
	s.shakes += shakes
	s.shakeAmount += gotAmount
	s.openedOK += opened
	s.openedAmount += openedAmount
}

// campaign pushes an ENVELOPE every `every` to the logged-in users of 1..users in turn until
// the test ends, as a send campaign that outlasts the run.
func (s *fakeServer) campaign(users uint32, every time.Duration) {
	stop, done := make(chan struct{}), make(chan struct{})
	s.t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		u := users
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			s.mu.Lock()
			var to *fakeConn
			for range users {
				if u = u%users + 1; s.conns[u] != nil {
					to = s.conns[u]
					break
				}
			}
			var push []byte
			if to != nil {
				s.nextEnv++
				s.pushed[[2]uint64{uint64(u), s.nextEnv}]++
				push = proto.AppendEnvelope(nil, 1, s.nextEnv, 0, 100, 3)
			}
			s.mu.Unlock()
			if to != nil {
				to.write(push)
			}
		}
	}()
}

func (f *fakeStats) add(o fakeStats) {
	f.connections += o.connections
	f.logins += o.logins
	f.shakes += o.shakes
	f.gotAmount += o.gotAmount
	f.opened += o.opened
	f.openedAmount += o.openedAmount
}

func (f fakeStats) json() map[string]any {
	return map[string]any{
		"connections": f.connections, "logins": f.logins,
		// Nothing in the pools, nothing outstanding: both invariants hold.
		"shake":     map[string]any{"requests": f.shakes, "got": f.shakes, "got_amount": f.gotAmount, "created_amount": f.gotAmount, "pool_amount": 0},
		"envelopes": map[string]any{"opened": f.opened, "opened_amount": f.openedAmount, "created_amount": f.openedAmount, "outstanding_amount": 0},
	}
}

// fakeCluster is the admin API of a cluster of fake gateways: GET /cluster lists them
// (node i+1 is gws[i]) and /cluster/stats sums the figures of those not in missing, which it
// lists; /stats answers the first gateway's own figures, as that gateway's admin would.
func fakeCluster(t *testing.T, gws []*fakeServer, missing ...int) *httptest.Server {
	t.Helper()
	down := map[int]bool{}
	for _, n := range missing {
		down[n] = true
	}
	h := http.NewServeMux()
	h.HandleFunc("GET /cluster", func(w http.ResponseWriter, r *http.Request) {
		var list []map[string]any
		for i, g := range gws {
			list = append(list, map[string]any{"node": i + 1, "addr": g.addr()})
		}
		json.NewEncoder(w).Encode(map[string]any{"gateways": list})
	})
	h.HandleFunc("GET /cluster/stats", func(w http.ResponseWriter, r *http.Request) {
		var sum fakeStats
		answered := 0
		for i, g := range gws {
			if !down[i+1] {
				sum.add(g.figures())
				answered++
			}
		}
		doc := sum.json()
		doc["gateways"] = answered
		doc["missing"] = append([]int{}, missing...)
		json.NewEncoder(w).Encode(doc)
	})
	h.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(gws[0].figures().json())
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// kill closes the listener and every connection, as a server killed mid-run.
func (s *fakeServer) kill() {
	s.mu.Lock()
	s.killed = true
	for nc := range s.all {
		nc.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.admin.Close()
}

// move hands every user to the gateway at to, as a gateway whose SETs failed over: each
// logged-in connection gets ERROR 9 and closes, and a LOGIN from then on is answered
// LOGIN_ACK 3 naming to.
func (s *fakeServer) move(to string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.redirect = func(uint32) (string, bool) { return to, true }
	for _, c := range s.conns {
		c.write(proto.AppendError(nil, 0, proto.ErrCodeMoved))
		c.nc.Close()
		s.moved++
	}
}

// shook returns how many of users first..last have SHAKEd here.
func (s *fakeServer) shook(first, last uint32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for u := first; u <= last; u++ {
		if s.shakesBy[u] > 0 {
			n++
		}
	}
	return n
}

// dropAll closes every connection but keeps listening, as a server that cut its clients off.
func (s *fakeServer) dropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for nc := range s.all {
		nc.Close()
	}
}

func (s *fakeServer) accept() {
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.killed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.all[nc] = true
		if host, _, err := net.SplitHostPort(nc.RemoteAddr().String()); err == nil {
			s.peers[host]++
		}
		s.mu.Unlock()
		go s.serve(&fakeConn{nc: nc})
	}
}

func (s *fakeServer) serve(c *fakeConn) {
	defer c.nc.Close()
	var user uint32
	defer func() {
		s.mu.Lock()
		if s.conns[user] == c {
			delete(s.conns, user)
		}
		delete(s.all, c.nc)
		s.mu.Unlock()
	}()
	buf := make([]byte, 0, 8192)
	tmp := make([]byte, 4096)
	var out []byte
	for {
		n, err := c.nc.Read(tmp)
		if n == 0 && err != nil {
			return
		}
		buf = append(buf, tmp[:n]...)
		out = out[:0]
		for {
			f, k, err := proto.NextRequest(buf)
			if err != nil {
				c.write(proto.AppendError(nil, 0, err.(*proto.Violation).Code))
				return
			}
			if k == 0 {
				break
			}
			if f.Type == proto.Login {
				u, _ := f.Login()
				s.mu.Lock()
				st := s.loginStatus
				var owner string
				moved := s.redirect != nil
				if moved {
					owner, moved = s.redirect(u)
				}
				switch {
				case moved:
					s.redirected[u]++
				case st == proto.LoginOK:
					user = u
					s.conns[user] = c
					s.logins++
					s.loggedIn[u]++
				}
				s.mu.Unlock()
				if moved {
					c.write(proto.AppendLoginRedirect(out, f.Stamp, u, owner))
					return
				}
				out = proto.AppendLoginAck(out, f.Stamp, st, u)
			} else if user == 0 {
				out = proto.AppendError(out, f.Stamp, proto.ErrCodeNotLoggedIn)
			} else {
				var drop uint8
				if out, drop = s.request(c, user, f, out); drop != 0 {
					s.end(c, out, drop)
					return
				}
			}
			buf = buf[:copy(buf, buf[k:])]
		}
		if len(out) > 0 {
			c.write(out)
		}
	}
}

// end ends c at an OPEN that drop says drops it: the answers made before it are written (then
// ERROR 9 with dropMoved), and the connection closes once the client has closed its side, so
// that nothing written is lost to a reset.
func (s *fakeServer) end(c *fakeConn, out []byte, drop uint8) {
	if drop == dropMoved {
		out = proto.AppendError(out, 0, proto.ErrCodeMoved)
		s.mu.Lock()
		s.moved++
		s.mu.Unlock()
	}
	c.write(out)
	c.nc.(*net.TCPConn).CloseWrite()
	c.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	io.Copy(io.Discard, c.nc)
}

// request answers one request of a logged-in user into out; pushes to other users are
// written to their connections directly. drop non-zero ends the connection after out.
func (s *fakeServer) request(c *fakeConn, user uint32, f proto.Frame, out []byte) (_ []byte, drop uint8) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch f.Type {
	case proto.Shake:
		id := f.RequestID()
		key := [2]uint64{uint64(user), id}
		if id != 0 {
			s.shakeIDs[user] = append(s.shakeIDs[user], id)
			if a, ok := s.kept[key]; ok {
				s.replayed++
				out = proto.AppendShakeResult(out, f.Stamp, proto.ShakeGot, a[0], uint32(a[1]))
				break
			}
		}
		s.shakes++
		s.nextEnv++
		amount := uint32(1 + s.shakes%97)
		s.shakeAmount += int64(amount)
		s.byStampSec[int64(f.Stamp/1e9)]++
		s.shakesBy[user]++
		s.lastShake = time.Now()
		if id != 0 {
			s.kept[key] = [2]uint64{s.nextEnv, uint64(amount)}
		}
		if s.dropShakes > 0 && !s.dropped[user] {
			s.dropShakes--
			s.dropped[user] = true
			return out, dropClose // counted, never told: a retry with the id is
		}
		out = proto.AppendShakeResult(out, f.Stamp, proto.ShakeGot, s.nextEnv, amount)
		if s.pushEvery > 0 && s.shakes%int64(s.pushEvery) == 0 {
			s.nextEnv++
			s.pushed[[2]uint64{uint64(user), s.nextEnv}]++
			out = proto.AppendEnvelope(out, uint64(s.shakes), s.nextEnv, 0, 100, 1)
		}
	case proto.Open:
		env := f.Open()
		key := [2]uint64{uint64(user), env}
		s.opened[key]++
		s.openedAt[key] = append(s.openedAt[key], time.Now())
		var act openAct
		if s.openRule != nil {
			act = s.openRule(user, env, s.opened[key])
		}
		draw := func() {
			if !s.drawn[key] {
				s.drawn[key] = true
				s.openedOK++
				s.openedAmount += openAmount
			}
		}
		switch {
		case s.pushed[key] == 0:
			out = proto.AppendOpenResult(out, f.Stamp, proto.OpenNotRecipient, env, 0)
		case act.drop != 0:
			draw()
			return out, act.drop
		case act.overload:
			if act.draw {
				draw()
			}
			out = proto.AppendOpenResult(out, f.Stamp, proto.OpenOverloaded, env, 0)
		case s.drawn[key]:
			out = proto.AppendOpenResult(out, f.Stamp, proto.OpenAlready, env, openAmount)
		default:
			draw()
			out = proto.AppendOpenResult(out, f.Stamp, proto.OpenOK, env, openAmount)
		}
		if act.again {
			s.pushed[key]++
			out = proto.AppendEnvelope(out, 1, env, 0, 100, 1)
		}
	case proto.Send:
		s.sends++
		s.nextEnv++
		total, n := f.Send()
		out = proto.AppendSendAck(out, f.Stamp, proto.SendOK, s.nextEnv)
		for i := range n {
			r := f.SendRecipient(i)
			if rc := s.conns[r]; rc != nil {
				s.pushed[[2]uint64{uint64(r), s.nextEnv}]++
				push := proto.AppendEnvelope(nil, 1, s.nextEnv, user, total, uint16(n))
				if rc == c {
					out = append(out, push...)
				} else {
					go rc.write(push) // not under s.mu: the recipient may be slow
				}
			}
		}
	case proto.Chat:
		s.chats++
		to, text := f.Chat()
		rc := s.conns[to]
		if rc == nil {
			return proto.AppendChatAck(out, f.Stamp, proto.ChatOffline, to), 0
		}
		deliver := proto.AppendChatDeliver(nil, f.Stamp, user, text)
		if rc == c {
			out = append(out, deliver...)
		} else {
			go rc.write(deliver)
		}
		out = proto.AppendChatAck(out, f.Stamp, proto.ChatHanded, to)
	case proto.Ping:
		out = proto.AppendPong(out, f.Stamp)
	}
	return out, 0
}
