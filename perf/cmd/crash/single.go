package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// runSingle is the run with one kill: the load client stopped at it, the
// restart on new ports; a nil error means every check passed.
func runSingle(ctx context.Context, cfg config) error {
	r, err := newRun(&cfg, "crash-", "crash")
	if err != nil {
		return err
	}
	defer r.close()
	r.Printf("crash: %d users, %d SHAKE/s, %g SEND/s; campaigns %d + %d a second; SIGKILL after %v; -data %s; files in %s/",
		cfg.users, cfg.qps, cfg.sendRate, cfg.camps.Shake, cfg.camps.Send, cfg.killAfter, r.data, r.Dir)
	args := r.serverArgs()
	secs := int((cfg.killAfter + 5*time.Second) / time.Second)
	l, err := r.startLoad(ctx, args, fmt.Sprintf("%d@%v", cfg.qps, cfg.killAfter+time.Minute), []string{"-reconcile", "off"}, []uint32{1, 2}, false, secs)
	if err != nil {
		return err
	}
	defer l.stop()
	pr, client := l.pr, l.client
	select {
	case <-time.After(cfg.killAfter):
	case <-ctx.Done():
		return ctx.Err()
	case <-client.Done():
		return fmt.Errorf("the load client ended before the kill: %v", client.Wait())
	}
	before, _, _ := r.srv.Admin.Campaigns()
	pr.killed.Store(true)
	killed := time.Now()
	r.srv.Kill() // SIGKILL: no final round, no snapshot, no goodbye
	r.Printf("\nSIGKILL server pid %d at %s; campaigns then: %s", r.srv.PID, killed.Format(time.RFC3339), harness.CampaignLine(before))
	l.stop()
	client.Signal(syscall.SIGTERM) // it reports what it was told
	if err := client.Wait(); err != nil {
		r.Printf("load client: %v (expected: its server is gone)", err)
	}
	lr, err := client.ReadReport()
	if err != nil {
		return err
	}
	toldShake, toldOpen := lr.ShakeAmount+pr.shakeFen, lr.OpenAmount+pr.openFen
	r.Printf("told before the kill: SHAKE_RESULT 1 %d fen (load client %d, probe %d), OPEN_RESULT 0 %d fen (load client %d, probe %d)",
		toldShake, lr.ShakeAmount, pr.shakeFen, toldOpen, lr.OpenAmount, pr.openFen)

	startTook, rec, err := r.restart(ctx, args, "server-2.log", time.Minute)
	if err != nil {
		return err
	}
	st, raw, err := r.srv.Admin.Stats()
	if err != nil {
		return err
	}
	os.WriteFile(r.Path("stats-after-restart.json"), raw, 0o644)
	r.Printf("restart: serving %v after exec; %s", startTook.Round(time.Millisecond), rec)

	r.Printf("\nchecks:")
	got, opened := uint64(st.Shake.GotAmount), uint64(st.Envelopes.OpenedAmount)
	r.check("SHAKE money told ≤ counted", got >= toldShake, "told %d fen, counted %d (got_amount): %d counted, never told", toldShake, got, int64(got)-int64(toldShake))
	r.check("OPEN money told ≤ counted", opened >= toldOpen, "told %d fen, counted %d (opened_amount): %d counted, never told", toldOpen, opened, int64(opened)-int64(toldOpen))
	r.check("the probe got envelopes before the kill", len(pr.shakeIDs) > 0 && len(pr.groupIDs) > 0, "%d shake and %d group envelope ids", len(pr.shakeIDs), len(pr.groupIDs))

	// After the restart: the probe again, its ids against those before.
	after := newProbe()
	stop2 := make(chan struct{})
	time.AfterFunc(2*time.Second, func() { close(stop2) })
	after.run(r.srv.Listen, probeUsers(&cfg), probeUsers(&cfg), stop2, false)
	r.errs = append(r.errs, pr.err(), after.err())
	reused := append(both(pr.shakeIDs, after.shakeIDs), both(pr.groupIDs, after.groupIDs)...)
	reused = append(reused, append(pr.twice, after.twice...)...)
	r.check("no envelope id handed out twice", len(reused) == 0, "%d shake + %d group ids before, %d + %d after the restart; %d reused %v",
		len(pr.shakeIDs), len(pr.groupIDs), len(after.shakeIDs), len(after.groupIDs), len(reused), first(reused, 5))

	r.campaigns(len(l.camps), time.Duration(secs)*time.Second+30*time.Second, "campaigns-after-restart.json")
	r.ledger()
	return r.finish(30 * time.Second)
}
