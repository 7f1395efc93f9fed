//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/campaign"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// The crash test: the real binary under load with campaigns running gets
// SIGKILL, then starts again on the same -data.
const (
	crashUsers      = 100
	crashSets       = 8
	crashLoad       = time.Second // load before the kill
	crashShakeRate  = 4000        // the shake campaign outlives the load: it resumes after the restart
	crashShakeTotal = 8000
	crashSendRate   = 200
	crashSendTotal  = 400
)

// TestKillUnderLoad: after kill -9 and a restart with the same -data, every
// SHAKE_RESULT 1 and OPEN_RESULT 0 the clients read is counted, both ledger
// invariants hold exactly, no envelope id is handed out twice, and the
// campaigns go on to deal exactly their totals.
func TestKillUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary under load")
	}
	bin := buildServer(t)
	data := t.TempDir()
	// Snapshots during the load: the restart loads the last one and replays
	// the journal after it.
	srv := startServer(t, bin, "-data", data, "-sets", fmt.Sprint(crashSets), "-snapshot-every", "300ms")

	clients := make([]*sigClient, crashUsers)
	idSec := time.Now().Unix()
	for i := range clients {
		clients[i] = &sigClient{user: uint32(i + 1), idSec: idSec}
		if err := clients[i].login(srv.listen); err != nil {
			t.Fatalf("login: %v", err)
		}
	}
	for _, c := range []string{
		fmt.Sprintf("shake?rate=%d&total=%d&min=1&max=200", crashShakeRate, crashShakeTotal),
		fmt.Sprintf("send?rate=%d&total=%d&recipients=3&min=3&max=2000", crashSendRate, crashSendTotal),
	} {
		if err := srv.post("/campaigns/" + c); err != nil {
			t.Fatal(err)
		}
	}
	var run sigRun
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run(&run)
		}()
	}
	time.Sleep(crashLoad)
	srv.kill() // SIGKILL: no shutdown, no final round, no snapshot
	wg.Wait()  // each client's read ends with the connection

	got, gotSum, opens, openSum := map[uint64]bool{}, uint64(0), 0, uint64(0)
	groupIDs := map[uint64]bool{}
	for _, c := range clients {
		for _, r := range c.shakes {
			if r.status == proto.ShakeGot {
				if got[r.env] {
					t.Fatalf("envelope %#x got twice before the kill", r.env)
				}
				got[r.env] = true
				gotSum += uint64(r.amount)
			}
		}
		for _, r := range c.opens {
			if r.status == proto.OpenOK {
				opens++
				openSum += uint64(r.amount)
			}
		}
		for env := range c.pushes {
			groupIDs[env] = true
		}
	}
	if len(got) < crashUsers || opens == 0 {
		t.Fatalf("%d envelopes got and %d shares opened before the kill: want a server under load", len(got), opens)
	}
	t.Logf("before the kill: %d SHAKEs got %d fen, %d OPENs got %d fen, %d group envelopes pushed", len(got), gotSum, opens, openSum, len(groupIDs))

	srv = startServer(t, bin, "-data", data, "-sets", fmt.Sprint(crashSets))
	if !strings.Contains(srv.logText(), `"snapshot":"`+data) {
		t.Errorf("the restart loaded no snapshot: %s", srv.logText())
	}
	// The server checked both invariants before serving (it refuses to
	// start otherwise); from now on the resumed campaigns deal, so /stats
	// balances only once they are done (checked below).
	var st server.Stats
	getJSON(t, srv, "/stats", &st)
	if st.Shake.GotAmount < gotSum || st.Envelopes.OpenedAmount < openSum {
		t.Fatalf("after the restart: got_amount %d, opened_amount %d; the clients read %d and %d", st.Shake.GotAmount, st.Envelopes.OpenedAmount, gotSum, openSum)
	}
	// The requests the kill left unanswered, sent again with their ids: what
	// the server counted is what the clients were told, exactly.
	var retried int
	for _, c := range clients {
		retried += len(c.pending)
		shakeSum, openS, err := c.retry(srv.listen)
		if err != nil {
			t.Fatal(err)
		}
		gotSum += shakeSum
		openSum += openS
	}
	getJSON(t, srv, "/stats", &st)
	if st.Shake.GotAmount != gotSum || st.Envelopes.OpenedAmount != openSum {
		t.Fatalf("after %d retries: got_amount %d, opened_amount %d; the clients were told %d and %d", retried, st.Shake.GotAmount, st.Envelopes.OpenedAmount, gotSum, openSum)
	}
	t.Logf("%d requests retried with their ids: told == counted, %d SHAKE fen and %d OPEN fen", retried, gotSum, openSum)

	// Every share a client opened is still its own: OPEN again answers 1
	// with the same amount.
	for _, c := range clients {
		var want []result
		for _, r := range c.opens {
			if r.status == proto.OpenOK {
				want = append(want, r)
			}
		}
		if len(want) > 0 {
			reopen(t, srv.listen, c.user, want)
		}
	}

	// The campaigns resume and deal exactly their totals.
	var cs []campaign.Status
	deadline := time.Now().Add(30 * time.Second)
	for {
		getJSON(t, srv, "/campaigns", &cs)
		if len(cs) == 2 && cs[0].Done && cs[1].Done || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range cs {
		if c.State != campaign.Finished || c.Dealt != c.Total {
			t.Fatalf("campaign after the restart: %+v; want finished with its total dealt", c)
		}
	}
	// Drain every pool: no envelope a client got before is in it, none twice.
	var drained, drainedSum uint64
	for u := range uint32(crashSets) {
		ids, sum := drain(t, srv.listen, 10_000+u)
		for _, id := range ids {
			if got[id] {
				t.Fatalf("envelope %#x handed out before the kill and again after it", id)
			}
			got[id] = true
		}
		drained += uint64(len(ids))
		drainedSum += sum
	}
	getJSON(t, srv, "/stats", &st)
	if err := st.Check(); err != nil {
		t.Fatal(err)
	}
	if st.Shake.Created != crashShakeTotal || st.Shake.Pool != 0 || st.Envelopes.Created > crashSendTotal {
		t.Fatalf("after the campaigns: %d shake envelopes created (want %d), %d in the pools (want 0), %d group envelopes (at most %d)",
			st.Shake.Created, crashShakeTotal, st.Shake.Pool, st.Envelopes.Created, crashSendTotal)
	}
	t.Logf("after the restart: %d more envelopes shaken (%d fen); ledger %d got of %d created", drained, drainedSum, st.Shake.Got, st.Shake.Created)

	// A new group envelope gets an id never handed out before.
	c := &sigClient{user: 1}
	if err := c.login(srv.listen); err != nil {
		t.Fatal(err)
	}
	c.nc.Write(proto.AppendSend(nil, 7, 100, []uint32{2, 3}))
	for {
		f, err := c.nextFrame()
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == proto.SendAck {
			if status, env := f.SendAck(); status != proto.SendOK || groupIDs[env] {
				t.Fatalf("SEND after the restart: status %d, envelope %#x (handed out before: %v)", status, env, groupIDs[env])
			}
			break
		}
	}
	c.nc.Close()
}

func getJSON(t *testing.T, s *sigServer, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + s.admin + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// reopen OPENs again, as user, every envelope of want and checks each
// answers "already opened" with the share the client read.
func reopen(t *testing.T, addr string, user uint32, want []result) {
	t.Helper()
	c := &sigClient{user: user}
	if err := c.login(addr); err != nil {
		t.Fatal(err)
	}
	defer c.nc.Close()
	var out []byte
	for i, r := range want {
		out = proto.AppendOpen(out, uint64(i+1), r.env)
	}
	c.nc.Write(out)
	for n := 0; n < len(want); {
		f, err := c.nextFrame()
		if err != nil {
			t.Fatalf("user %d: %v", user, err)
		}
		if f.Type != proto.OpenResult {
			continue // ENVELOPE pushes
		}
		r := want[f.Stamp-1]
		if status, env, amount := f.OpenResult(); status != proto.OpenAlready || env != r.env || amount != r.amount {
			t.Fatalf("user %d OPEN %#x again after the restart: status %d, %d fen; it had read status 0, %d fen", user, r.env, status, amount, r.amount)
		}
		n++
	}
}

// drain SHAKEs as user until its SET's pool answers empty.
func drain(t *testing.T, addr string, user uint32) (ids []uint64, sum uint64) {
	t.Helper()
	c := &sigClient{user: user}
	if err := c.login(addr); err != nil {
		t.Fatal(err)
	}
	defer c.nc.Close()
	for stamp := uint64(1); ; stamp++ {
		c.nc.Write(proto.AppendShake(nil, stamp))
		f, err := c.nextFrame()
		for err == nil && f.Type != proto.ShakeResult {
			f, err = c.nextFrame()
		}
		if err != nil {
			t.Fatal(err)
		}
		status, id, amount := f.ShakeResult()
		if status != proto.ShakeGot {
			return ids, sum
		}
		ids = append(ids, id)
		sum += uint64(amount)
	}
}
