package main

import (
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/flagtest"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

func TestParseFlags(t *testing.T) {
	f := func(args string, wantErrs ...string) config {
		t.Helper()
		return flagtest.Parse(t, "soak", parseFlags, args, wantErrs...)
	}
	c := f("")
	if c.duration != 10*time.Minute || c.qps != 30000 || c.users != 19000 || c.interval != 10*time.Second || c.plan() != "0@20s,30000@600s" {
		t.Errorf("defaults: %+v, plan %s", c, c.plan())
	}
	f("-duration 2m -qps 1000 -users 500 -churn 5")
	f("-duration 1.5s -ramp 0s -qps 0 -churn -1 -interval 1m -source 10.0.0.1 -server-flags -admin=x -opened-retention 1ms -client-timeout 0s",
		"-client-timeout", "-duration", "-ramp", "-qps", "-churn", "-interval", "loopback", "-server-flags", "-opened-retention")
}

func TestLeastSquares(t *testing.T) {
	if s, se, ok := leastSquares([]float64{0, 1, 2, 3}, []float64{1, 3, 5, 7}); !ok || s != 2 || se != 0 {
		t.Errorf("a line of slope 2: got %v ± %v, %v", s, se, ok)
	}
	// Residuals −0.3, 0.9, −0.9, 0.3 around 5.3 − 0.2x: RSS 1.8, sxx 5.
	if s, se, ok := leastSquares([]float64{0, 1, 2, 3}, []float64{5, 6, 4, 5}); !ok || math.Abs(s+0.2) > 1e-12 || math.Abs(se-math.Sqrt(1.8/2/5)) > 1e-12 {
		t.Errorf("noise around 5: got %v ± %v, %v; want -0.2 ± %v", s, se, ok, math.Sqrt(1.8/2/5))
	}
	if _, _, ok := leastSquares([]float64{1, 1}, []float64{1, 2}); ok {
		t.Error("one distinct x: got ok")
	}
	if _, _, ok := leastSquares([]float64{1}, []float64{1}); ok {
		t.Error("one point: got ok")
	}
}

// TestTrends checks the windows and verdicts: a figure growing 1 MiB a
// minute from 100 MiB grows (≈ +58 % an hour); a constant one is flat;
// samples in the ramp, after the load or failed are left out.
func TestTrends(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	var ss []harness.Sample
	for i := -3; i <= 13; i++ { // every 30 s from the ramp to past a 6-minute load
		at := start.Add(time.Duration(i) * 30 * time.Second)
		s := harness.Sample{At: at, RSS: int64(100<<20 + float64(i)*0.5*(1<<20)), FDs: int64(10 + 2*(i%3%2)), Metrics: map[string]float64{"go_goroutines": 170}}
		if i < 0 || i == 5 || i > 12 {
			s.RSS, s.Metrics["go_goroutines"] = 1<<40, 1<<20 // must not count
		}
		if i == 5 {
			s.Err = io.ErrUnexpectedEOF
		}
		ss = append(ss, s)
	}
	ts := trends(ss, start, 6*time.Minute)
	byName := map[string]trend{}
	for _, tr := range ts {
		byName[tr.m.name] = tr
	}
	rss, g := byName["RSS"], byName["goroutines"]
	if !rss.ok || math.Abs(rss.slope-1) > 1e-9 || math.Abs(rss.slope2-1) > 1e-9 || rss.verdict != "GROWS" || rss.samples != 12 || rss.samples2 != 7 {
		t.Errorf("RSS: %+v; want slope 1 MiB/min over 12 samples (7 in the second half), GROWS", rss)
	}
	if g.slope != 0 || g.verdict != "flat" || g.first != 170 || g.max != 170 {
		t.Errorf("goroutines: %+v; want flat at 170", g)
	}
	if fds := byName["open descriptors"]; fds.slope2 == 0 || math.Abs(fds.perHourPct) < flatWithin*100 || fds.verdict != "flat" {
		t.Errorf("descriptors stepping between 10 and 12: %+v; want a slope over 5 %% an hour, but flat: noise", fds)
	}
	if table := trendTable(ts).Markdown(); !strings.Contains(table, "| RSS | 100.0 MiB | 106.0 MiB |") {
		t.Errorf("table:\n%s", table)
	}
}
