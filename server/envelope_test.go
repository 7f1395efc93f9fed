package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/client/wire"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// These tests move money: shake campaigns, SEND and OPEN, send campaigns, and
// check it against /stats and /campaigns. Users u and u+4 share a SET.

// got is one envelope a client received.
type got struct {
	env    uint64
	amount uint32
}

func TestShakeCampaignDrained(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	const shakers, total, window = 20, 500, 4
	camp := ts.startCampaign("shake", fmt.Sprintf("rate=2000&total=%d&min=1&max=1000", total))

	var taken atomic.Int64
	results := make([][]got, shakers)
	errs := make(chan error, shakers)
	var wg sync.WaitGroup
	for i := range shakers {
		user := uint32(i + 1)
		c := login(t, ts, user).c // the raw connection, read by its own goroutine below
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- shake(c, &taken, total, window, &results[i])
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	seen := map[uint64]bool{}
	var sum uint64
	for _, rs := range results {
		for _, r := range rs {
			if seen[r.env] {
				t.Errorf("envelope %#x handed out twice", r.env)
			}
			seen[r.env] = true
			sum += uint64(r.amount)
			if r.amount < 1 || r.amount > 1000 {
				t.Errorf("envelope %#x of %d fen; want 1..1000", r.env, r.amount)
			}
		}
	}
	if len(seen) != total {
		t.Fatalf("got %d envelopes; want all %d", len(seen), total)
	}
	final := ts.waitCampaign(camp.ID)
	st := ts.stats()
	if st.Shake.GotAmount != sum || final.Amount != sum || st.Shake.Got != total {
		t.Errorf("clients got %d fen; /stats shake.got_amount %d (got %d), campaign amount %d: want all equal, %d envelopes",
			sum, st.Shake.GotAmount, st.Shake.Got, final.Amount, total)
	}
	if st.Shake.Created != total || st.Shake.CreatedAmount != final.Amount || st.Shake.Pool != 0 || st.Shake.PoolAmount != 0 {
		t.Errorf("shake stats %+v; want %d created for %d fen and an empty pool", st.Shake, total, final.Amount)
	}
	checkShakeLedger(t, st)
}

// shake SHAKEs with window requests in flight until taken reaches total,
// appending what c got to out.
func shake(c *wire.Conn, taken *atomic.Int64, total int64, window int, out *[]got) error {
	stamp := uint64(0)
	deadline := time.Now().Add(waitTime)
	for taken.Load() < total {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d envelopes taken after %v", taken.Load(), total, waitTime)
		}
		var b []byte
		for range window {
			stamp++
			b = proto.AppendShake(b, stamp)
		}
		if err := c.Send(b); err != nil {
			return err
		}
		for range window {
			f, err := c.Expect(proto.ShakeResult, waitTime)
			if err != nil {
				return err
			}
			st, env, amount := f.ShakeResult()
			switch st {
			case proto.ShakeGot:
				*out = append(*out, got{env, amount})
				taken.Add(1)
			case proto.ShakeNothing, proto.ShakeOverloaded:
				if env != 0 || amount != 0 {
					return fmt.Errorf("SHAKE_RESULT status %d with envelope %#x amount %d; want 0, 0", st, env, amount)
				}
			default:
				return fmt.Errorf("SHAKE_RESULT status %d", st)
			}
		}
	}
	return nil
}

func TestSendAndOpen(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	sender := login(t, ts, 1)    // SET 1
	rcpt := []uint32{2, 3, 4, 6} // SETs 2, 3, 0, 2
	outsider := login(t, ts, 5)  // SET 1, not a recipient
	cs := map[uint32]*client{1: sender, 5: outsider}
	for _, u := range rcpt {
		cs[u] = login(t, ts, u)
	}
	const total = 1000
	before := time.Now().UnixNano()
	s := sender.nextStamp()
	sender.send(proto.AppendSend(nil, s, total, rcpt))
	st, env := sender.answer(s).SendAck()
	after := time.Now().UnixNano()
	if st != proto.SendOK || env == 0 {
		t.Fatalf("SEND_ACK status %d envelope %#x; want 0 and an id", st, env)
	}

	var sum uint64
	shares := map[uint32]uint32{}
	for _, u := range rcpt {
		c := cs[u]
		p := c.push(proto.Envelope)
		e, from, tot, n := p.Envelope()
		if e != env || from != 1 || tot != total || n != uint16(len(rcpt)) {
			t.Fatalf("user %d: %s; want envelope %#x from 1 total %d shares %d", u, describe(p), env, total, len(rcpt))
		}
		if int64(p.Stamp) < before || int64(p.Stamp) > after {
			t.Errorf("user %d: ENVELOPE stamp %d; want the creation time, within [%d, %d]", u, p.Stamp, before, after)
		}
		s := c.nextStamp()
		c.send(proto.AppendOpen(nil, s, env))
		st, e, amount := c.answer(s).OpenResult()
		if st != proto.OpenOK || e != env || amount < 1 {
			t.Fatalf("user %d: OPEN_RESULT status %d envelope %#x amount %d; want 0, %#x, ≥ 1", u, st, e, amount, env)
		}
		shares[u] = amount
		sum += uint64(amount)
	}
	if sum != total {
		t.Errorf("shares %v add up to %d; want %d", shares, sum, total)
	}

	open := func(c *client, id uint64, wantStatus uint8, wantAmount uint32) {
		t.Helper()
		s := c.nextStamp()
		c.send(proto.AppendOpen(nil, s, id))
		f := c.answer(s)
		if st, e, amount := f.OpenResult(); f.Type != proto.OpenResult || st != wantStatus || e != id || amount != wantAmount {
			t.Errorf("user %d OPEN %#x: %s; want status %d amount %d", c.user, id, describe(f), wantStatus, wantAmount)
		}
	}
	for _, u := range rcpt {
		open(cs[u], env, proto.OpenAlready, shares[u])
	}
	open(outsider, env, proto.OpenNotRecipient, 0)
	open(sender, env, proto.OpenNotRecipient, 0)
	open(outsider, env+1, proto.OpenNoSuch, 0)      // the owner SET has no such id
	open(outsider, 12345, proto.OpenNoSuch, 0)      // SET 0's space, never issued
	open(outsider, 4000<<51|1, proto.OpenNoSuch, 0) // a SET this server does not run
	open(outsider, 1<<63|1, proto.OpenNoSuch, 0)    // a shake id
	open(outsider, 0, proto.OpenNoSuch, 0)

	invalid := []struct {
		name  string
		total uint32
		rcpt  []uint32
	}{
		{"no recipients", 100, nil},
		{"total below n", 2, []uint32{2, 3, 4}},
		{"total 0", 0, []uint32{2}},
		{"total above 20000", 20001, []uint32{2}},
		{"101 recipients", 20000, seq(10, 101)},
		{"duplicate recipient", 100, []uint32{2, 3, 2}},
		{"sender among recipients", 100, []uint32{2, 1}},
		{"recipient 0", 100, []uint32{2, 0}},
	}
	for _, c := range invalid {
		s := sender.nextStamp()
		sender.send(proto.AppendSend(nil, s, c.total, c.rcpt))
		f := sender.answer(s)
		if st, e := f.SendAck(); f.Type != proto.SendAck || st != proto.SendInvalid || e != 0 {
			t.Errorf("SEND %s: %s; want SEND_ACK 1 envelope 0", c.name, describe(f))
		}
	}
	s = sender.nextStamp() // the limits are inclusive
	sender.send(proto.AppendSend(nil, s, 20000, seq(10, 100)))
	if st, _ := sender.answer(s).SendAck(); st != proto.SendOK {
		t.Errorf("SEND of 20000 fen to 100 recipients: status %d; want 0", st)
	}

	// Each recipient was pushed the envelope once, and no one else was: any
	// ENVELOPE still unread arrives before the PONG of the same SET.
	for u, c := range cs {
		c.ping()
		for _, p := range c.pushes {
			if p.Type == proto.Envelope {
				t.Errorf("user %d: another push, %s", u, describe(p))
			}
		}
	}

	stats := ts.stats()
	e := stats.Envelopes
	if e.Created != 2 || e.CreatedAmount != total+20000 || e.Opened != uint64(len(rcpt)) || e.OpenedAmount != total ||
		e.OutstandingAmount != 20000 || e.SendInvalid != uint64(len(invalid)) {
		t.Errorf("envelope stats %+v; want 2 created for %d fen, %d opened for %d, 20000 outstanding, %d invalid",
			e, total+20000, len(rcpt), total, len(invalid))
	}
	checkEnvelopeLedger(t, stats)
}

// seq returns n user ids from first up.
func seq(first uint32, n int) []uint32 {
	us := make([]uint32, n)
	for i := range us {
		us[i] = first + uint32(i)
	}
	return us
}

func TestSendCampaign(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	const users, envelopes, recipients = 40, 20, 3

	// Every user reads in its own goroutine, opens each ENVELOPE pushed to it
	// at once and records the push and its share.
	type share struct {
		user   uint32
		amount uint32
	}
	var (
		mu     sync.Mutex
		totals = map[uint64]uint32{}   // envelope → total, from the pushes
		pushed = map[uint64][]uint32{} // envelope → users it was pushed to
		opened = map[uint64][]share{}  // envelope → shares opened
		bad    []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		bad = append(bad, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range users {
		user := uint32(i + 1)
		c := login(t, ts, user).c // the raw connection, read by its own goroutine below
		wg.Add(1)
		go func() {
			defer wg.Done()
			stamp := uint64(0)
			for {
				select {
				case <-stop:
					return
				default:
				}
				f, err := c.Next(50 * time.Millisecond)
				if err != nil {
					if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
						continue
					}
					fail("user %d: %v", user, err)
					return
				}
				switch f.Type {
				case proto.Envelope:
					env, sender, total, n := f.Envelope()
					if sender != 0 || n != recipients {
						fail("user %d: %s; want sender 0 (the system), %d shares", user, describe(f), recipients)
					}
					mu.Lock()
					pushed[env] = append(pushed[env], user)
					if was, ok := totals[env]; ok && was != total {
						bad = append(bad, fmt.Sprintf("envelope %#x pushed with totals %d and %d", env, was, total))
					}
					totals[env] = total
					mu.Unlock()
					stamp++
					if err := c.Send(proto.AppendOpen(nil, stamp, env)); err != nil {
						fail("user %d: %v", user, err)
						return
					}
				case proto.OpenResult:
					st, env, amount := f.OpenResult()
					if st != proto.OpenOK {
						fail("user %d: %s; want status 0", user, describe(f))
					}
					mu.Lock()
					opened[env] = append(opened[env], share{user, amount})
					mu.Unlock()
				default:
					fail("user %d: unexpected %s", user, describe(f))
					return
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	// Every user is online (the SETs' session stages have them) before the campaign.
	waitFor(t, "every login", func() bool { return ts.stats().Logins == users })

	camp := ts.startCampaign("send", fmt.Sprintf("rate=200&total=%d&recipients=%d&min=100&max=500", envelopes, recipients))
	final := ts.waitCampaign(camp.ID)
	waitFor(t, "every envelope pushed and opened", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			return true
		}
		if len(pushed) != envelopes {
			return false
		}
		for env := range pushed {
			if len(opened[env]) != recipients {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	var created, sum uint64
	for env, us := range pushed {
		distinct := map[uint32]bool{}
		for _, u := range us {
			distinct[u] = true
		}
		if len(us) != recipients || len(distinct) != recipients {
			t.Errorf("envelope %#x pushed to %v; want %d distinct users", env, us, recipients)
		}
		total := totals[env]
		if total < 100 || total > 500 {
			t.Errorf("envelope %#x of %d fen; want 100..500", env, total)
		}
		created += uint64(total)
		var s uint64
		for _, sh := range opened[env] {
			if !distinct[sh.user] || sh.amount < 1 {
				t.Errorf("envelope %#x: user %d opened %d fen; want a recipient, ≥ 1 fen", env, sh.user, sh.amount)
			}
			s += uint64(sh.amount)
		}
		if s != uint64(total) {
			t.Errorf("envelope %#x: shares add up to %d; want its total %d", env, s, total)
		}
		sum += s
	}
	st := ts.stats()
	e := st.Envelopes
	if final.Amount != created || e.CreatedAmount != created || e.OpenedAmount != sum || e.OutstandingAmount != 0 ||
		e.Created != envelopes || e.SystemSkipped != 0 {
		t.Errorf("campaign amount %d, envelope stats %+v; want %d envelopes of %d fen created, all opened, none skipped",
			final.Amount, e, envelopes, created)
	}
	checkEnvelopeLedger(t, st)
}

func TestCampaignValidation(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	f := func(query, param string) {
		t.Helper()
		path := "/campaigns/" + query
		code, body := ts.do(http.MethodPost, path, "")
		var e struct{ Error string }
		if err := json.Unmarshal(body, &e); err != nil || code != http.StatusBadRequest {
			t.Errorf("POST %s: %d %s; want 400 with a JSON error", path, code, body)
			return
		}
		if !strings.HasPrefix(e.Error, param+"=") && !strings.HasPrefix(e.Error, param+":") {
			t.Errorf("POST %s: error %q; want it to name %s", path, e.Error, param)
		}
	}
	f("shake?rate=-1&total=10&min=1&max=10", "rate")
	f("shake?rate=0&total=10&min=1&max=10", "rate")
	f("shake?rate=2000000&total=10&min=1&max=10", "rate")
	f("shake?rate=99999999999999999999&total=10&min=1&max=10", "rate")
	f("shake?rate=ten&total=10&min=1&max=10", "rate")
	f("shake?rate=1.5&total=10&min=1&max=10", "rate")
	f("shake?total=10&min=1&max=10", "rate")
	f("shake?rate=10&total=-10&min=1&max=10", "total")
	f("shake?rate=10&total=0&min=1&max=10", "total")
	f("shake?rate=10&total=99999999999999&min=1&max=10", "total")
	f("shake?rate=10&total=x&min=1&max=10", "total")
	f("shake?rate=10&min=1&max=10", "total")
	f("shake?rate=10&total=10&min=0&max=10", "min")
	f("shake?rate=10&total=10&min=-1&max=10", "min")
	f("shake?rate=10&total=10&min=4294967296&max=10", "min")
	f("shake?rate=10&total=10&max=10", "min")
	f("shake?rate=10&total=10&min=20&max=10", "max")
	f("shake?rate=10&total=10&min=1&max=20001", "max")
	f("shake?rate=10&total=10&min=1&max=abc", "max")
	f("shake?rate=10&total=10&min=1", "max")
	f("send?rate=10&total=10&min=10&max=100", "recipients")
	f("send?rate=10&total=10&recipients=0&min=10&max=100", "recipients")
	f("send?rate=10&total=10&recipients=101&min=200&max=300", "recipients")
	f("send?rate=10&total=10&recipients=-3&min=10&max=100", "recipients")
	f("send?rate=10&total=10&recipients=70000&min=10&max=100", "recipients")
	f("send?rate=10&total=10&recipients=5&min=4&max=100", "min")
	f("send?rate=10&total=10&recipients=5&min=50&max=40", "max")
	if cs := ts.campaigns(); len(cs) != 0 {
		t.Errorf("GET /campaigns: %+v; want none started by bad requests", cs)
	}
	// The good ones are accepted.
	ts.startCampaign("shake", "rate=10&total=10&min=1&max=10")
	ts.startCampaign("send", "rate=10&total=10&recipients=5&min=5&max=20000")
}

func TestAdminToken(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(o *server.Options) { o.AdminToken = "open sesame" })
	for _, ep := range []struct{ method, path string }{
		{"GET", "/stats"},
		{"GET", "/metrics"},
		{"GET", "/campaigns"},
		{"POST", "/campaigns/shake?rate=1&total=1&min=1&max=1"},
		{"GET", "/debug/pprof/"},
		{"GET", "/debug/pprof/cmdline"},
		{"GET", "/debug/pprof/goroutine?debug=1"},
	} {
		for _, tok := range []string{"", "open", "open sesame!", "OPEN SESAME"} {
			if code, body := ts.do(ep.method, ep.path, tok); code != http.StatusUnauthorized {
				t.Errorf("%s %s with token %q: %d %.100s; want 401", ep.method, ep.path, tok, code, body)
			}
		}
		if code, body := ts.do(ep.method, ep.path, "open sesame"); code != http.StatusOK {
			t.Errorf("%s %s with the token: %d %.100s; want 200", ep.method, ep.path, code, body)
		}
	}
	if cs := ts.campaigns(); len(cs) != 1 {
		t.Errorf("%d campaigns; want the one POST that carried the token", len(cs))
	}
}

// The read token reads what a scraper, a health check and a dashboard
// read, and nothing else: not a campaign, not a profile; the admin token
// still does everything.
func TestReadToken(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(o *server.Options) { o.AdminToken, o.ReadToken = "admin secret", "read only" })
	for _, ep := range []struct {
		method, path string
		read         int // its status with the read token
	}{
		{"GET", "/metrics", http.StatusOK},
		{"GET", "/healthz", http.StatusOK},
		{"GET", "/stats", http.StatusOK},
		{"GET", "/campaigns", http.StatusOK},
		{"GET", "/console/data", http.StatusOK},
		{"HEAD", "/stats", http.StatusOK},
		{"POST", "/campaigns/shake?rate=1&total=1&min=1&max=1", http.StatusForbidden},
		{"DELETE", "/campaigns/1", http.StatusForbidden},
		{"GET", "/debug/pprof/cmdline", http.StatusForbidden},
		{"GET", "/debug/pprof/goroutine?debug=1", http.StatusForbidden},
	} {
		if code, body := ts.do(ep.method, ep.path, "read only"); code != ep.read {
			t.Errorf("%s %s with the read token: %d %.100s; want %d", ep.method, ep.path, code, body, ep.read)
		}
		if code, _ := ts.do(ep.method, ep.path, "read only!"); code != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong token: %d; want 401", ep.method, ep.path, code)
		}
	}
	if code, body := ts.do("POST", "/campaigns/shake?rate=1&total=1&min=1&max=1", "admin secret"); code != http.StatusOK {
		t.Errorf("a campaign with the admin token: %d %s", code, body)
	}
	if cs := ts.campaigns(); len(cs) != 1 {
		t.Errorf("%d campaigns; want the one the admin token started", len(cs))
	}
	for _, o := range []server.Options{{ReadToken: "r"}, {AdminToken: "same", ReadToken: "same"}} {
		o.Listen, o.Admin, o.Journal = "127.0.0.1:0", "127.0.0.1:0", "off"
		o.Fill()
		if s, err := server.New(o, slog.New(slog.DiscardHandler)); err == nil {
			s.Shutdown(context.Background())
			t.Errorf("admin token %q, read token %q: started; want refused", o.AdminToken, o.ReadToken)
		}
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	for u := uint32(1); u <= 3; u++ {
		login(t, ts, u).ping()
	}
	// Every round trip is in the histogram, under its request type: 3 LOGINs
	// and 3 PINGs. The egress counts an answer after writing it, so the
	// client may have read it first.
	var text string
	latency := func(typ string) (inf, count int) {
		for _, line := range strings.Split(text, "\n") {
			fmt.Sscanf(line, `hongbao_latency_seconds_bucket{type="`+typ+`",le="+Inf"} %d`, &inf)
			fmt.Sscanf(line, `hongbao_latency_seconds_count{type="`+typ+`"} %d`, &count)
		}
		return inf, count
	}
	waitFor(t, "hongbao_connections 3 and 3 LOGINs and 3 PINGs timed", func() bool {
		_, body := ts.do("GET", "/metrics", "")
		text = string(body)
		_, logins := latency("login")
		_, pings := latency("ping")
		return strings.Contains(text, "\nhongbao_connections 3\n") && logins == 3 && pings == 3
	})
	for _, want := range []string{
		"# TYPE hongbao_latency_seconds histogram\n",
		`hongbao_latency_seconds_bucket{type="shake",le="+Inf"} 0`,
		`hongbao_shake_total{result="got"} `,
		`hongbao_ring_occupancy{set="3"} `,
		`hongbao_ring_capacity{set="3"} 128`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	for _, typ := range []string{"login", "ping"} {
		if inf, count := latency(typ); inf != 3 || count != 3 {
			t.Errorf("%s latency: +Inf bucket %d, count %d; want 3 round trips", typ, inf, count)
		}
	}
}

// TestShakeAnswerToClosedConnection checks that envelopes whose SHAKE_RESULT
// could not be written because the client had gone are not lost: the ledger
// stays exact, and they can be shaken again.
func TestShakeAnswerToClosedConnection(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(o *server.Options) { o.Ring = 64 })
	camp := ts.startCampaign("shake", "rate=20000&total=4000&min=1&max=1000")
	final := ts.waitCampaign(camp.ID) // every pool full: the first 4,000 SHAKEs each get one
	const waves, clients, shakes = 6, 20, 50
	user := uint32(0)
	var burst []byte
	for i := range shakes {
		burst = proto.AppendShake(burst, uint64(i+1))
	}
	for range waves {
		for i := range clients {
			user++
			c := dial(t, ts)
			switch i % 4 {
			case 0: // everything in one write, then gone
				c.send(proto.AppendLogin(nil, 0, user, nil), burst)
			case 1: // logged in, then the SHAKEs, then gone
				c.login(user, nil)
				c.send(burst)
			case 2: // gone with a reset, unread data and all
				c.login(user, nil)
				c.send(burst)
				c.c.Conn.(interface{ SetLinger(int) error }).SetLinger(0)
			case 3: // everything in one write, then a reset: it comes before the
				// server can answer, whose writes then fail (the requests
				// themselves stay readable and are served)
				c.send(proto.AppendLogin(nil, 0, user, nil), burst)
				c.c.Conn.(interface{ SetLinger(int) error }).SetLinger(0)
			}
			c.c.Close()
		}
	}
	waitFor(t, "every connection released", func() bool { return ts.stats().Connections == 0 })
	var st server.Stats
	waitFor(t, "the shake ledger to balance", func() bool {
		st = ts.stats()
		s := st.Shake
		return s.CreatedAmount == s.GotAmount+s.PoolAmount && s.Created == s.Got+s.Pool
	})
	t.Logf("shake stats: %+v", st.Shake)
	if st.Shake.Returned == 0 {
		t.Errorf("no envelope went back to the pool: the test did not close a connection with a SHAKE_RESULT in flight")
	}
	if st.Shake.CreatedAmount != final.Amount {
		t.Errorf("shake.created_amount %d; want the campaign's %d", st.Shake.CreatedAmount, final.Amount)
	}
	// What is in the pool is really there: one user per SET shakes it empty.
	var drained uint64
	for u := uint32(1_000_001); u <= 1_000_004; u++ {
		c := login(t, ts, u)
		for {
			s := c.nextStamp()
			c.send(proto.AppendShake(nil, s))
			status, _, amount := c.answer(s).ShakeResult()
			if status == proto.ShakeNothing {
				break
			}
			drained += uint64(amount)
		}
	}
	after := ts.stats()
	if drained != st.Shake.PoolAmount || after.Shake.PoolAmount != 0 || after.Shake.GotAmount != st.Shake.GotAmount+drained {
		t.Errorf("drained %d fen from a pool of %d; after: %+v", drained, st.Shake.PoolAmount, after.Shake)
	}
	checkShakeLedger(t, after)
}

// TestGroupEnvelopeExpires checks -envelope-ttl: an envelope not fully opened
// in time is gone (OPEN answers 3) and its remainder refunded, the ledger
// still exact.
func TestGroupEnvelopeExpires(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(o *server.Options) { o.EnvelopeTTL = time.Second })
	sender, a, b := login(t, ts, 1), login(t, ts, 2), login(t, ts, 3)
	sent := time.Now() // no later than the envelope's creation
	s := sender.nextStamp()
	sender.send(proto.AppendSend(nil, s, 500, []uint32{2, 3}))
	_, env := sender.answer(s).SendAck()
	a.push(proto.Envelope)
	s = a.nextStamp()
	a.send(proto.AppendOpen(nil, s, env))
	st, _, share := a.answer(s).OpenResult()
	if st != proto.OpenOK {
		t.Fatalf("OPEN: status %d; want 0", st)
	}
	// The sender, not a recipient, asks until the envelope is gone.
	waitFor(t, "the envelope to expire", func() bool {
		s := sender.nextStamp()
		sender.send(proto.AppendOpen(nil, s, env))
		st, _, _ := sender.answer(s).OpenResult()
		return st == proto.OpenNoSuch
	})
	if age := time.Since(sent); age < time.Second-10*time.Millisecond { // the margin: the server's wall clock against this monotonic one
		t.Errorf("envelope gone %v after its SEND; want it kept for the 1s TTL", age)
	}
	b.push(proto.Envelope)
	s = b.nextStamp()
	b.send(proto.AppendOpen(nil, s, env))
	if st, _, amount := b.answer(s).OpenResult(); st != proto.OpenNoSuch || amount != 0 {
		t.Errorf("OPEN after expiry: status %d amount %d; want 3, 0", st, amount)
	}
	stats := ts.stats()
	e := stats.Envelopes
	if e.Refunded != 1 || e.RefundedAmount != uint64(500-share) || e.LiveAmount != 0 || e.OpenedAmount != uint64(share) {
		t.Errorf("envelope stats %+v; want 1 refunded for %d fen, nothing live, %d opened", e, 500-share, share)
	}
	checkEnvelopeLedger(t, stats)
}
