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

	"github.com/hongbao-io/hongbao/client/wire"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

const (
	// scaleHolders idle recipients per SET stay online while the send
	// campaign deals (a system envelope goes to its SET's online users);
	// they never OPEN, so every group envelope stays live.
	scaleHolders = 4
	scaleSets    = 32              // the server's -sets (its default)
	scaleTarget  = 5 * time.Second // the restart time aimed at
)

// runScale builds -scale-pool pooled shake envelopes and -scale-groups live
// group envelopes, kills the server with SIGKILL and starts it again on the
// same -data: the recovery's time and the RSS it leaves.
func runScale(ctx context.Context, cfg config) error {
	r, err := newRun(&cfg, "crash-scale-", "crash -scale")
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
	if _, err := r.start(ctx, "server-1.log", args, 0); err != nil {
		return err
	}
	r.Printf("server: %s", r.srv.CommandLine())
	srv := r.srv

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
	if err := srv.Admin.WaitCampaigns(cfg.scaleTimeout); err != nil {
		return fmt.Errorf("building the state: %w", err)
	}
	st, raw, err := srv.Admin.Stats()
	if err != nil {
		return err
	}
	live := liveOf(raw)
	os.WriteFile(r.Path("stats-before-kill.json"), raw, 0o644)
	if st.Shake.Pool < int64(cfg.scalePool) || live+st.Envelopes.SystemSkipped < int64(cfg.scaleGroups) {
		return fmt.Errorf("pool %d, live group envelopes %d (+%d skipped); want %d and %d", st.Shake.Pool, live, st.Envelopes.SystemSkipped, cfg.scalePool, cfg.scaleGroups)
	}
	rss1, _ := harness.RSS(srv.PID)
	r.Printf("built in %v: pool %d envelopes (%d fen), live group envelopes %d (%d fen), skipped %d; RSS %s",
		time.Since(start).Round(100*time.Millisecond), st.Shake.Pool, st.Shake.PoolAmount, live, st.Envelopes.LiveAmount, st.Envelopes.SystemSkipped, harness.MiB(rss1))
	du, _ := dirSize(r.data)
	srv.Kill()
	r.Printf("SIGKILL server pid %d at %s; -data holds %s", srv.PID, time.Now().Format(time.RFC3339), harness.MiB(du))

	serving, rec, err := r.restart(ctx, args, "server-2.log", 2*time.Minute)
	if err != nil {
		return err
	}
	rss2, _ := harness.RSS(r.srv.PID)
	st2, raw2, err := r.srv.Admin.Stats()
	if err != nil {
		return err
	}
	os.WriteFile(r.Path("stats-after-restart.json"), raw2, 0o644)
	r.Printf("restart: serving %v after exec, RSS %s; %s", serving.Round(time.Millisecond), harness.MiB(rss2), rec)
	r.Printf("\nchecks:")
	r.check("the pools recovered whole", st2.Shake.Pool == st.Shake.Pool && st2.Shake.PoolAmount == st.Shake.PoolAmount,
		"%d envelopes %d fen (before the kill %d, %d)", st2.Shake.Pool, st2.Shake.PoolAmount, st.Shake.Pool, st.Shake.PoolAmount)
	r.check("the live group envelopes recovered whole", liveOf(raw2) == live && st2.Envelopes.LiveAmount == st.Envelopes.LiveAmount,
		"%d envelopes %d fen (before the kill %d, %d)", liveOf(raw2), st2.Envelopes.LiveAmount, live, st.Envelopes.LiveAmount)
	r.check(fmt.Sprintf("recovered within %v", scaleTarget), rec.took() <= scaleTarget, "%v (the log's took); serving %v after exec", rec.took().Round(time.Millisecond), serving.Round(time.Millisecond))
	return r.finish(2 * time.Minute)
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
