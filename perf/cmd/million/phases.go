package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// ramp prints a progress line a second until every server has all of its
// users logged in.
func (s *state) ramp(ctx context.Context) error {
	cfg := &s.cfg
	last := statSum{at: s.launched}
	for {
		if err := s.sleep(ctx, time.Until(time.Now().Truncate(time.Second).Add(time.Second))); err != nil {
			return err
		}
		st, r, err := s.second("ramp", last)
		if err != nil {
			return fmt.Errorf("during the ramp: %w", err)
		}
		if st.conns > 0 && s.firstUp.IsZero() {
			s.firstUp = st.at
		}
		sys, th := s.smp.latest(), harness.Thousands
		s.Say("ramp %6.1fs  %s/%s up (%5.1f%%)  %s/s  logins %s  servers full %d/%d  MemAvailable %s  Slab +%s  conntrack %d",
			st.at.Sub(s.launched).Seconds(), th(st.conns), th(int64(cfg.conns)), 100*float64(st.conns)/float64(cfg.conns),
			th(int64(r.New)), th(st.logins), st.full, len(s.pairs), harness.GiB(sys.MemAvailable), harness.GiB(sys.Slab-s.sys[readIdle].Slab), sys.Conntrack)
		last = st
		if st.full == len(s.pairs) {
			s.rampDone = st.at
			took := s.rampDone.Sub(s.launched).Seconds()
			s.Say("ramp done: %s connections in %.1fs from the launch of the load clients (%.1fs from the first connection up), %s connects/s on average",
				th(st.conns), took, s.rampDone.Sub(s.firstUp).Seconds(), th(int64(float64(st.conns)/took)))
			return nil
		}
		if time.Since(s.launched) > cfg.rampTimeout {
			var short []string
			for i, p := range s.pairs {
				if n := int64(p.users.Len()); st.per[i].Connections != n || st.per[i].Logins < n {
					short = append(short, fmt.Sprintf("server %d: %d/%d", i, st.per[i].Connections, n))
				}
			}
			return fmt.Errorf("ramp: %d of %d connections up after %v (-ramp-timeout); short: %s", st.conns, cfg.conns, cfg.rampTimeout, strings.Join(short[:min(len(short), 10)], ", "))
		}
	}
}

// load switches every load client to -qps on the same whole second, starts
// the campaigns, reports a line a second, and switches back to 0 after
// -duration.
func (s *state) load(ctx context.Context) error {
	cfg := &s.cfg
	s.smp.setPhase("load")
	var err error
	if s.stats0, err = s.pollStats(); err != nil {
		return err
	}
	// Just after a whole second: every client's next whole second at least
	// 50 ms away is then the same one.
	if err := s.sleep(ctx, time.Until(time.Now().Truncate(time.Second).Add(time.Second+20*time.Millisecond))); err != nil {
		return err
	}
	if s.loadStart, err = s.setQPS(cfg.qps); err != nil {
		return err
	}
	s.loadEnd = s.loadStart.Add(cfg.duration)
	if err := s.sleep(ctx, time.Until(s.loadStart)); err != nil {
		return err
	}
	s.load0 = s.markCPU()
	secs := int(cfg.duration / time.Second)
	err = forEach(len(s.pairs), len(s.pairs), func(i int) error {
		p, errs := s.pairs[i], []error{}
		if p.shakeRate > 0 {
			_, err := p.srv.Admin.StartCampaign("shake", harness.ShakeCampaign(p.shakeRate, secs))
			errs = append(errs, err)
		}
		if p.sendRate > 0 {
			_, err := p.srv.Admin.StartCampaign("send", harness.SendCampaign(p.sendRate, secs, cfg.recipients))
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("server %d: %w", i, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.Say("load: %d SHAKE/s from %s for %v; shake campaign %d/s, send campaign %d/s × %d recipients over %d servers",
		cfg.qps, s.loadStart.Format(time.TimeOnly), cfg.duration, cfg.shakeRate, cfg.sendRate, cfg.recipients, len(s.pairs))
	last := s.stats0
	last.at = s.loadStart
	for t := s.loadStart.Add(time.Second + 300*time.Millisecond); t.Before(s.loadEnd.Add(-time.Second)); t = t.Add(time.Second) {
		if err := s.sleep(ctx, time.Until(t)); err != nil {
			return err
		}
		st, r, err := s.second("load", last)
		if err != nil {
			return fmt.Errorf("during the load: %w", err)
		}
		s.perSecond = append(s.perSecond, r.Shakes)
		s.Say("load %4.0fs  SHAKE %s/s (servers)  got %.0f/s  group envelopes %.0f/s  shares opened %.0f/s  conns %s  MemAvailable %s",
			st.at.Sub(s.loadStart).Seconds(), harness.Thousands(int64(r.Shakes)), r.Got, r.Created, r.Opened, harness.Thousands(st.conns), harness.GiB(s.smp.latest().MemAvailable))
		last = st
	}
	// Back to 0 on the load's last boundary.
	if err := s.sleep(ctx, time.Until(s.loadEnd.Add(-time.Second+20*time.Millisecond))); err != nil {
		return err
	}
	stop, err := s.setQPS(0)
	if err != nil {
		return err
	}
	if !stop.Equal(s.loadEnd) {
		s.note("the load clients switched to 0 at %s, not at %s: the load ran %v", stop.Format(time.TimeOnly), s.loadEnd.Format(time.TimeOnly), stop.Sub(s.loadStart))
		s.loadEnd = stop
	}
	if err := s.sleep(ctx, time.Until(s.loadEnd.Add(500*time.Millisecond))); err != nil {
		return err
	}
	s.load1 = s.markCPU()
	// The campaigns end with the load; then the last pushes are opened.
	s.smp.setPhase("tail")
	if err := forEach(len(s.pairs), len(s.pairs), func(i int) error { return s.pairs[i].srv.Admin.WaitCampaigns(30 * time.Second) }); err != nil {
		return err
	}
	if err := s.sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	s.stats1, err = s.pollStats()
	return err
}

// setQPS sets every load client's total rate at once and returns the
// second they switch on; they must all agree.
func (s *state) setQPS(qps int) (time.Time, error) {
	at := make([]time.Time, len(s.pairs))
	err := forEach(len(s.pairs), len(s.pairs), func(i int) (err error) {
		at[i], err = s.pairs[i].setQPS(qps)
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	first, last := slices.MinFunc(at, time.Time.Compare), slices.MaxFunc(at, time.Time.Compare)
	if !first.Equal(last) {
		s.note("/qps?set=%d: the load clients switch between %s and %s, not on one second", qps, first.Format(time.TimeOnly), last.Format(time.TimeOnly))
	}
	return last, nil
}

// finish ends the load clients (each drains, reconciles with its server and
// reports), checks every server's ledger and the sums, and stops the servers.
func (s *state) finish(ctx context.Context) error {
	s.smp.setPhase("drain")
	s.Say("SIGTERM to the load clients: each drains, reconciles with its own server's /stats and closes its connections")
	t0 := time.Now()
	for _, p := range s.pairs {
		p.cli.Signal(syscall.SIGTERM)
	}
	var errs []error
	for _, p := range s.pairs {
		select {
		case <-p.cli.Done():
		case <-time.After(time.Until(t0.Add(3 * time.Minute))):
			p.cli.Signal(syscall.SIGKILL)
			errs = append(errs, fmt.Errorf("load client %d did not exit 3 minutes after SIGTERM; killed", p.index))
		}
		if err := p.cli.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("load client %d: %v (see %s)", p.index, err, p.cli.Log))
		}
		var err error
		if p.rep, err = p.cli.ReadReport(); err != nil {
			errs = append(errs, fmt.Errorf("load client %d: %w", p.index, err))
		} else if !harness.Reconciled(p.rep) {
			errs = append(errs, fmt.Errorf("load client %d: reconciliation with server %d failed (see %s)", p.index, p.index, p.cli.Report))
		}
	}
	s.Say("load clients exited %.1fs after SIGTERM", time.Since(t0).Seconds())

	s.smp.setPhase("ledger")
	errs = append(errs, forEach(len(s.pairs), 8, func(i int) error {
		p := s.pairs[i]
		if _, err := p.srv.Admin.WaitConnections(0, false, 60*time.Second); err != nil {
			return fmt.Errorf("server %d after its load client left: %w", i, err)
		}
		l, err := p.srv.Admin.SettledLedger(time.Second, nil)
		if err != nil {
			return fmt.Errorf("server %d: %w", i, err)
		}
		p.stats, p.camps, p.checks = l.Stats, l.Campaigns, l.Checks
		if bad := harness.FailedChecks(p.checks); len(bad) > 0 {
			return fmt.Errorf("server %d ledger: %s", i, strings.Join(bad, "; "))
		}
		return nil
	}))
	s.srvTotals, s.cliTotals = sumTotals(s.pairs)
	s.summed = summedChecks(s.srvTotals, s.cliTotals)
	for _, c := range s.summed {
		if !c.OK() {
			errs = append(errs, fmt.Errorf("summed: %s", c))
		}
	}

	// SIGTERM to the servers, all at once; each must exit 0.
	s.smp.setPhase("stop")
	errs = append(errs, forEach(len(s.pairs), len(s.pairs), func(i int) (err error) {
		s.pairs[i].exitCode, err = s.pairs[i].srv.Stop(30 * time.Second)
		return err
	}))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.passed = ctx.Err() == nil
	return nil
}
