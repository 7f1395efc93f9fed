//go:build linux

package loadclient_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
)

// checkOpenMoney checks the OPEN money of r: learned shares learned by a repeated OPEN,
// ok OPENs answered 0, each share of openAmount fen and told once; and that the strict
// reconciliation passed with nothing unresolved.
func checkOpenMoney(t *testing.T, r *loadclient.Report, learned, ok uint64) {
	t.Helper()
	open := r.Requests["OPEN"]
	if open.Status["0"] != ok || r.OpenLearned != learned || r.OpenLearnedAmount != learned*openAmount ||
		r.OpenAmount != (ok+learned)*openAmount || r.OpenUnresolved != 0 {
		t.Errorf("OPEN status %v, learned %d (%d fen), OPEN money %d fen, unresolved %d; want 0:%d, %d learned (%d fen), %d fen, none unresolved",
			open.Status, r.OpenLearned, r.OpenLearnedAmount, r.OpenAmount, r.OpenUnresolved, ok, learned, learned*openAmount, (ok+learned)*openAmount)
	}
	rec := r.Reconcile
	if rec == nil || !rec.OK || rec.Mode != "" || rec.OpenUnresolved != 0 {
		t.Fatalf("reconcile %+v; want a strict one, ok, nothing unresolved", rec)
	}
	for _, c := range rec.Checks {
		if c.Figure == "ENVELOPE pushes opened ok" && c.Got != int64(ok+learned) {
			t.Errorf("check %+v; want %d pushes opened, each with a share told", c, ok+learned)
		}
	}
}

// TestOpenAgainAfterOverload: the fake answers the first OPEN of every envelope 5, having
// drawn the share (a cluster's crossing that timed out) or not (a single server's full ring).
// The client sends each OPEN again 50 to 100 ms later, and that answer settles it: 1 with the
// share drawn before, learned and counted once, or 0 with a share drawn now, an ordinary OPEN
// 0. Either way the strict reconciliation is exact.
func TestOpenAgainAfterOverload(t *testing.T) {
	for _, drawn := range []bool{true, false} {
		t.Run(fmt.Sprintf("drawn %v", drawn), func(t *testing.T) {
			t.Parallel() // it waits on the servers and the clock, not on the CPU
			fake := newFakeServer(t, 3)
			fake.mu.Lock()
			fake.openRule = func(_ uint32, _ uint64, n int) openAct { return openAct{overload: n == 1, draw: drawn} }
			fake.mu.Unlock()
			cfg := config(t, "-server", fake.addr(), "-users", "1-10", "-qps", "50", "-duration", "2s", "-admin", fake.admin.URL)
			r, err, _ := run(t, cfg, 20*time.Second)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			checkAccounts(t, r)
			fake.mu.Lock()
			opened := uint64(len(fake.opened))
			for key, n := range fake.opened {
				at := fake.openedAt[key]
				if n != 2 {
					t.Errorf("user %d envelope %d: opened %d times; want twice, answered 5 then settled", key[0], key[1], n)
				} else if gap := at[1].Sub(at[0]); gap < 50*time.Millisecond || gap > time.Second {
					t.Errorf("user %d envelope %d: opened again %v after the 5; want at least 50 ms (and not a second)", key[0], key[1], gap)
				}
			}
			fake.mu.Unlock()
			if opened == 0 {
				t.Fatal("no envelope opened")
			}
			open := r.Requests["OPEN"]
			if open.Sent != 2*opened || open.Status["5"] != opened || r.OpenResent != opened {
				t.Errorf("OPEN sent %d, status %v, sent again %d; want %d, 5:%d, %d", open.Sent, open.Status, r.OpenResent, 2*opened, opened, opened)
			}
			learned, ok := opened, uint64(0)
			if !drawn {
				learned, ok = 0, opened
			}
			if open.Status["1"] != learned {
				t.Errorf("OPEN status %v; want 1:%d", open.Status, learned)
			}
			checkOpenMoney(t, r, learned, ok)
			var summary strings.Builder
			r.WriteSummary(&summary)
			want := fmt.Sprintf("OPEN sent again %d times (answered 5, or in flight when the connection ended): %d shares learned by a repeated OPEN", opened, learned)
			if !strings.Contains(summary.String(), want) {
				t.Errorf("summary does not say %q:\n%s", want, summary.String())
			}
			doc, _ := json.Marshal(r)
			for _, want := range []string{fmt.Sprintf(`"open_resent":%d`, opened), fmt.Sprintf(`"open_learned":%d`, learned), `"open_unresolved":0`} {
				if !strings.Contains(string(doc), want) {
					t.Errorf("JSON report lacks %s: %s", want, doc)
				}
			}
		})
	}
}

// TestOpenAgainAfterDrop: the fake draws the share of the first OPEN of every envelope and
// then, instead of answering, ends the connection: closes it, or sends ERROR 9 (moved) first.
// The user logs in again and sends the OPEN again, answered 1 with the share: learned, counted
// once, and the strict reconciliation is exact. The OPENs in flight at ERROR 9 count as lost
// (they may have drawn a share), not as moved.
func TestOpenAgainAfterDrop(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop uint8
		args []string
	}{{"closed", dropClose, []string{"-restarts"}}, {"moved", dropMoved, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // it waits on the servers and the clock, not on the CPU
			fake := newFakeServer(t, 3)
			drops := uint64(0)
			fake.mu.Lock()
			fake.openRule = func(_ uint32, _ uint64, n int) openAct {
				if n == 1 {
					drops++
					return openAct{drop: tc.drop}
				}
				return openAct{}
			}
			fake.mu.Unlock()
			cfg := config(t, append([]string{"-server", fake.addr(), "-users", "1-6", "-qps", "30", "-duration", "2s",
				"-admin", fake.admin.URL}, tc.args...)...)
			r, err, _ := run(t, cfg, 20*time.Second)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			checkAccounts(t, r)
			fake.mu.Lock()
			for key, n := range fake.opened {
				if n != 2 {
					t.Errorf("user %d envelope %d: opened %d times; want twice, dropped then answered 1", key[0], key[1], n)
				}
			}
			opened, moved := uint64(len(fake.opened)), uint64(fake.moved)
			fake.mu.Unlock()
			if opened == 0 || drops != opened {
				t.Fatalf("%d envelopes opened, %d connections dropped; want some, one per envelope", opened, drops)
			}
			open := r.Requests["OPEN"]
			if open.Status["1"] != opened || open.Lost < opened || open.NotDone != 0 || r.OpenResent < opened {
				t.Errorf("OPEN %+v, sent again %d; want 1:%d, at least %d lost, none moved, at least %d sent again", open, r.OpenResent, opened, opened, opened)
			}
			if r.Outages != drops || r.Reconnects != drops || tc.drop == dropMoved && (r.Moved != drops || moved != drops) {
				t.Errorf("outages %d, reconnects %d, moved %d (the fake %d); want %d of each (moved only with ERROR 9)", r.Outages, r.Reconnects, r.Moved, moved, drops)
			}
			checkOpenMoney(t, r, opened, 0)
		})
	}
}

// TestOpenAlreadyNotResent: an OPEN answered 1 that is not a re-send tells no share of its
// own. The fake answers each envelope's first OPEN 5 having drawn the share, the OPEN sent
// again 1, then pushes the envelope again; the client opens that push, answered 1 too, and
// counts nothing for it: each share is told once. The strict reconciliation agrees on the
// money and, as for any push of an envelope opened before, finds the pushes opened short by
// those second pushes.
func TestOpenAlreadyNotResent(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	fake := newFakeServer(t, 3)
	fake.mu.Lock()
	fake.openRule = func(_ uint32, _ uint64, n int) openAct {
		return openAct{overload: n == 1, draw: n == 1, again: n == 2}
	}
	fake.mu.Unlock()
	cfg := config(t, "-server", fake.addr(), "-users", "1-10", "-qps", "50", "-duration", "2s", "-admin", fake.admin.URL)
	r, err, _ := run(t, cfg, 20*time.Second)
	if err == nil || !strings.Contains(err.Error(), "ENVELOPE pushes opened ok") {
		t.Fatalf("Run: %v; want the pushes opened short by the envelopes pushed again", err)
	}
	checkAccounts(t, r)
	var opened, again uint64 // envelopes opened; of them, pushed again and opened again
	fake.mu.Lock()
	for _, n := range fake.opened {
		opened++
		if n == 3 {
			again++
		}
	}
	fake.mu.Unlock()
	if opened == 0 || again == 0 {
		t.Fatalf("%d envelopes opened, %d of them again; want some of each", opened, again)
	}
	open := r.Requests["OPEN"]
	if open.Status["5"] != opened || open.Status["1"] != opened+again || open.Status["0"] != 0 || r.OpenResent != opened {
		t.Errorf("OPEN status %v, sent again %d; want 5:%d 1:%d, %d sent again", open.Status, r.OpenResent, opened, opened+again, opened)
	}
	if r.OpenLearned != opened || r.OpenAmount != opened*openAmount || r.Repeated != 0 {
		t.Errorf("learned %d, OPEN money %d fen, pushes repeated %d; want %d learned, %d fen (each share once), none repeated",
			r.OpenLearned, r.OpenAmount, r.Repeated, opened, opened*openAmount)
	}
	rec := r.Reconcile
	if rec == nil {
		t.Fatal("no reconciliation")
	}
	for _, c := range rec.Checks {
		bad := c.Figure == "ENVELOPE pushes opened ok"
		if bad && c.Diff != -int64(again) || !bad && c.Diff != 0 {
			t.Errorf("check %+v; want it to agree, but the pushes opened ok short by the %d pushed again", c, again)
		}
	}
}

// TestOpenAgainAfterTheEnd: the sends are over and the client still opens the pushes of a
// campaign when the fake drops connections at a first OPEN, having drawn its share. The user
// connects again though the run's sends are over, sends the OPEN again and learns the share
// before the figures are read: the strict reconciliation is exact.
func TestOpenAgainAfterTheEnd(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	fake := newFakeServer(t, 0)
	var drops []time.Time
	fake.mu.Lock()
	fake.openRule = func(_ uint32, _ uint64, n int) openAct {
		// SHAKEs stopped 100 ms ago: the sends are over.
		if n == 1 && len(drops) < 2 && !fake.lastShake.IsZero() && time.Since(fake.lastShake) > 100*time.Millisecond {
			drops = append(drops, time.Now())
			return openAct{drop: dropClose}
		}
		return openAct{}
	}
	fake.mu.Unlock()
	fake.campaign(4, 20*time.Millisecond)
	cfg := config(t, "-server", fake.addr(), "-users", "1-4", "-qps", "100", "-duration", "1s", "-restarts",
		"-admin", fake.admin.URL)
	r, err, _ := run(t, cfg, 20*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	fake.mu.Lock()
	dropped := uint64(len(drops))
	for _, at := range drops {
		t.Logf("dropped %v after the end of the sends", at.Sub(r.Start.Add(cfg.Duration)))
	}
	fake.mu.Unlock()
	if dropped == 0 {
		t.Fatal("no connection dropped after the sends")
	}
	if r.OpenLearned != dropped || r.Reconnects != dropped || r.OpenUnresolved != 0 {
		t.Errorf("learned %d, reconnects %d, unresolved %d; want %d, %d, 0", r.OpenLearned, r.Reconnects, r.OpenUnresolved, dropped, dropped)
	}
	if rec := r.Reconcile; rec == nil || !rec.OK || len(rec.InFlight) != 0 || rec.OpenUnresolved != 0 {
		t.Errorf("reconcile %+v; want ok, nothing in flight or unresolved", rec)
	}
}

// TestOpenUnresolved: the fake answers every OPEN 5, the first having drawn the share, so no
// open ever gets a final answer. The client sends them again until the grace runs out, then
// reports them unresolved, and the strict reconciliation's mismatch says they may hold the
// shares it misses.
func TestOpenUnresolved(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	fake := newFakeServer(t, 3)
	fake.mu.Lock()
	fake.openRule = func(_ uint32, _ uint64, n int) openAct { return openAct{overload: true, draw: n == 1} }
	fake.mu.Unlock()
	cfg := config(t, "-server", fake.addr(), "-users", "1-6", "-qps", "30", "-duration", "1s", "-grace", "1s",
		"-admin", fake.admin.URL)
	r, err, _ := run(t, cfg, 20*time.Second)
	fake.mu.Lock()
	opened := int64(len(fake.opened))
	fake.mu.Unlock()
	if opened == 0 {
		t.Fatal("no envelope opened")
	}
	want := fmt.Sprintf("; %d opens without a final answer after the grace: each may hold a share drawn and never told", opened)
	if err == nil || !strings.Contains(err.Error(), "envelopes.opened_amount") || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("Run: %v; want the OPEN money short and %q", err, want)
	}
	if rec := r.Reconcile; rec.OpenUnresolved != opened || r.OpenUnresolved != opened || r.OpenAmount != 0 || r.OpenResent < uint64(opened) {
		t.Errorf("unresolved %d in the reconciliation, %d at the end; OPEN money %d, sent again %d; want %d, %d, 0, at least %d",
			rec.OpenUnresolved, r.OpenUnresolved, r.OpenAmount, r.OpenResent, opened, opened, opened)
	}
	for _, c := range r.Reconcile.Checks {
		if c.Figure == "ENVELOPE pushes opened ok" && (c.Want != 0 || c.Got != 0) {
			t.Errorf("check %+v; want every push opened unresolved, none owed a share", c)
		}
	}
}
