package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"hongbao/client/wire"
	"hongbao/perf/internal/harness"
)

// scaleHolders is how many idle recipients per SET stay online while the
// send campaign deals: a system envelope's recipients are picked among its
// SET's online users. They read and drop their pushes and never OPEN, so
// every group envelope stays live.
const scaleHolders = 4

// scaleSets is the server's -sets for -scale (its default).
const scaleSets = 32

// scaleTarget is the restart time the project aims at for this state.
const scaleTarget = 5 * time.Second

// runScale builds -scale-pool pooled shake envelopes and -scale-groups live
// group envelopes, kills the server with SIGKILL and starts it again on the
// same -data: the recovery's time and the RSS it leaves.
func runScale(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	r, err := newRun(&cfg, "crash-scale-", stdout, stderr)
	if err != nil {
		return err
	}
	defer r.close()
	r.Printf("crash -scale: %d pooled shake envelopes + %d live group envelopes, SIGKILL, restart; -data %s; files in %s/", cfg.scalePool, cfg.scaleGroups, r.data, r.Dir)

	// Room for the state: the pool and the group envelopes, each SET's share
	// of the envelope budget with a margin.
	args := []string{"-data", r.data, "-sets", strconv.Itoa(scaleSets),
		"-max-pool", strconv.Itoa(cfg.scalePool + cfg.scalePool/8),
		"-max-envelopes", strconv.Itoa(cfg.scaleGroups + cfg.scaleGroups/4)}
	args = append(args, strings.Fields(cfg.ServerFlags)...)
	srv, err := r.start(ctx, args)
	if err != nil {
		return err
	}
	defer srv.Kill()

	for u := uint32(1); u <= scaleSets*scaleHolders; u++ {
		c, err := wire.DialLogin(srv.Listen, u)
		if err != nil {
			return fmt.Errorf("recipient %d: %w", u, err)
		}
		defer c.Close()
		go io.Copy(io.Discard, c.Conn) // read and drop the pushes
	}
	if _, err := srv.Admin.WaitConnections(scaleSets*scaleHolders, true, 30*time.Second); err != nil {
		return err
	}
	start := time.Now()
	for _, p := range []struct {
		kind string
		q    url.Values
	}{
		{"shake", url.Values{"rate": {"1000000"}, "total": {strconv.Itoa(cfg.scalePool)}, "min": {"1"}, "max": {"200"}}},
		{"send", url.Values{"rate": {"1000000"}, "total": {strconv.Itoa(cfg.scaleGroups)}, "recipients": {"1"}, "min": {"1"}, "max": {"2000"}}},
	} {
		c, err := srv.Admin.StartCampaign(p.kind, p.q)
		if err != nil {
			return err
		}
		r.Printf("POST /campaigns/%s?%s → campaign %d", p.kind, p.q.Encode(), c.ID)
	}
	var st harness.Stats
	var live int64
	for {
		if time.Since(start) > cfg.scaleTimeout {
			return fmt.Errorf("after %v: pool %d, live group envelopes %d; want %d and %d", cfg.scaleTimeout, st.Shake.Pool, live, cfg.scalePool, cfg.scaleGroups)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		var raw []byte
		st, raw, err = srv.Admin.Stats()
		if err != nil {
			return err
		}
		live = liveOf(raw)
		if st.Shake.Pool >= int64(cfg.scalePool) && live+st.Envelopes.SystemSkipped >= int64(cfg.scaleGroups) {
			break
		}
	}
	if err := srv.Admin.WaitCampaigns(time.Minute); err != nil {
		return err
	}
	st, raw, err := srv.Admin.Stats()
	if err != nil {
		return err
	}
	live = liveOf(raw)
	os.WriteFile(r.Path("stats-before-kill.json"), raw, 0o644)
	rss1, _ := harness.RSS(srv.PID)
	r.Printf("built in %v: pool %d envelopes (%d fen), live group envelopes %d (%d fen), skipped %d; RSS %.1f MiB",
		time.Since(start).Round(100*time.Millisecond), st.Shake.Pool, st.Shake.PoolAmount, live, st.Envelopes.LiveAmount, st.Envelopes.SystemSkipped, mib(rss1))
	du, _ := dirSize(r.data)
	srv.Kill()
	r.Printf("SIGKILL server pid %d at %s; -data holds %.1f MiB", srv.PID, time.Now().Format(time.RFC3339), mib(du))

	srv2, serving, rec, err := r.restart(ctx, args, "server-2.log", 2*time.Minute)
	if err != nil {
		return err
	}
	defer srv2.Kill()
	rss2, _ := harness.RSS(srv2.PID)
	st2, raw2, err := srv2.Admin.Stats()
	if err != nil {
		return err
	}
	os.WriteFile(r.Path("stats-after-restart.json"), raw2, 0o644)
	r.Printf("restart: serving %v after exec, RSS %.1f MiB; %s", serving.Round(time.Millisecond), mib(rss2), rec)
	r.Printf("\nchecks:")
	r.check("the pools recovered whole", st2.Shake.Pool == st.Shake.Pool && st2.Shake.PoolAmount == st.Shake.PoolAmount,
		"%d envelopes %d fen (before the kill %d, %d)", st2.Shake.Pool, st2.Shake.PoolAmount, st.Shake.Pool, st.Shake.PoolAmount)
	r.check("the live group envelopes recovered whole", liveOf(raw2) == live && st2.Envelopes.LiveAmount == st.Envelopes.LiveAmount,
		"%d envelopes %d fen (before the kill %d, %d)", liveOf(raw2), st2.Envelopes.LiveAmount, live, st.Envelopes.LiveAmount)
	r.check(fmt.Sprintf("recovered within %v", scaleTarget), rec.took() <= scaleTarget, "%v (the log's took); serving %v after exec", rec.took().Round(time.Millisecond), serving.Round(time.Millisecond))
	return r.finish(srv2, 2*time.Minute, "crash -scale")
}

// liveOf reads envelopes.live from /stats.
func liveOf(raw []byte) int64 {
	var st struct {
		Envelopes struct {
			Live int64 `json:"live"`
		} `json:"envelopes"`
	}
	json.Unmarshal(raw, &st)
	return st.Envelopes.Live
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// dirSize is the bytes of the files under dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n, err
}
