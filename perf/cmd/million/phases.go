package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"hongbao/perf/internal/harness"
)

// ramp prints a progress line a second until every server has all of its
// users logged in.
func (s *state) ramp(ctx context.Context) error {
	cfg := &s.cfg
	deadline := s.launched.Add(cfg.rampTimeout)
	var last statSum
	last.at = s.launched
	for {
		next := time.Now().Truncate(time.Second).Add(time.Second)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(next)):
		}
		if err := s.alive(); err != nil {
			return err
		}
		st, err := s.pollStats()
		if err != nil {
			return fmt.Errorf("during the ramp: %w", err)
		}
		if st.conns > 0 && s.firstUp.IsZero() {
			s.firstUp = st.at
		}
		sys := s.smp.latest()
		rate := float64(st.conns-last.conns) / st.at.Sub(last.at).Seconds()
		s.Say("ramp %6.1fs  %s/%s up (%5.1f%%)  %s/s  logins %s  servers full %d/%d  MemAvailable %s  Slab +%s  conntrack %d",
			st.at.Sub(s.launched).Seconds(), harness.Thousands(st.conns), harness.Thousands(int64(cfg.conns)), 100*float64(st.conns)/float64(cfg.conns),
			harness.Thousands(int64(rate)), harness.Thousands(st.logins), st.full, len(s.servers), harness.GiB(sys.MemAvailable), harness.GiB(sys.Slab-s.sys[readIdle].Slab), sys.Conntrack)
		s.smp.addStats("ramp", st, last)
		last = st
		if st.full == len(s.servers) {
			s.rampDone = st.at
			s.Say("ramp done: %s connections in %.1fs from the launch of the load clients (%.1fs from the first connection up), %s connects/s on average",
				harness.Thousands(st.conns), s.rampDone.Sub(s.launched).Seconds(), s.rampDone.Sub(s.firstUp).Seconds(),
				harness.Thousands(int64(float64(st.conns)/s.rampDone.Sub(s.launched).Seconds())))
			return nil
		}
		if time.Now().After(deadline) {
			var short []string
			for i, p := range s.servers {
				if n := int64(p.part.users.Len()); st.per[i].Connections != n || st.per[i].Logins < n {
					short = append(short, fmt.Sprintf("server %d: %d/%d", i, st.per[i].Connections, n))
				}
			}
			return fmt.Errorf("ramp: %d of %d connections up after %v (-ramp-timeout); short: %s", st.conns, cfg.conns, cfg.rampTimeout, strings.Join(short[:min(len(short), 10)], ", "))
		}
	}
}

// readMemory reads the machine first, then the load clients' RSS, then
// each server's memory after a GC (the /metrics scrape lists /proc/PID/fd,
// which grows the kernel's dentry cache).
func (s *state) readMemory(at int) error {
	var err error
	if s.sys[at], err = harness.ReadSystem(true); err != nil {
		return err
	}
	for _, c := range s.clients {
		if c.rss[at], err = harness.RSS(c.PID()); err != nil {
			return err
		}
	}
	return forEach(len(s.servers), 4, func(i int) (err error) {
		s.servers[i].mem[at], err = harness.ReadGoMemory(s.servers[i].srv)
		return err
	})
}

// memory adds up one reading of every process: the servers' RSS and Go
// heap + stacks, the load clients' RSS.
func (s *state) memory(at int) (srss, sheap, crss int64) {
	for _, p := range s.servers {
		srss += p.mem[at].RSS
		sheap += p.mem[at].HeapStacks()
	}
	for _, c := range s.clients {
		crss += c.rss[at]
	}
	return srss, sheap, crss
}

func (s *state) sayMemory(when string, at int) {
	srss, sheap, crss := s.memory(at)
	n, sys, idle := s.cfg.conns, s.sys[at], s.sys[readIdle]
	s.Say("memory %s: servers RSS %s (%s/conn), Go heap+stacks %s; load clients RSS %s (%s/user); Slab %s (+%s, %s/conn), SUnreclaim +%s; MemAvailable %s (−%s since the start)",
		when, harness.MiB(srss), harness.Per(srss, n), harness.MiB(sheap), harness.MiB(crss), harness.Per(crss, n), harness.GiB(sys.Slab), harness.GiB(sys.Slab-idle.Slab),
		harness.Per(sys.Slab-idle.Slab, n), harness.GiB(sys.SUnreclaim-idle.SUnreclaim), harness.GiB(sys.MemAvailable), harness.GiB(s.sysStart.MemAvailable-sys.MemAvailable))
}

// cpuSum is the CPU time the servers and the load clients have used.
type cpuSum struct{ servers, clients time.Duration }

func (s *state) readCPU() cpuSum {
	var c cpuSum
	for _, p := range s.servers {
		d, _ := harness.CPUTime(p.srv.PID)
		c.servers += d
	}
	for _, p := range s.clients {
		d, _ := harness.CPUTime(p.PID())
		c.clients += d
	}
	return c
}

// machineBusy is every CPU's busy time so far; 0 if /proc/stat is unreadable.
func machineBusy() time.Duration {
	b, _ := harness.MachineBusy()
	return b
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
	start, err := s.setQPS(cfg.qps)
	if err != nil {
		return err
	}
	s.loadStart = start
	s.loadEnd = start.Add(cfg.duration)
	if err := s.sleep(ctx, time.Until(start)); err != nil {
		return err
	}
	s.cpu0, s.busy0 = s.readCPU(), machineBusy()
	if err := s.startCampaigns(); err != nil {
		return err
	}
	s.Say("load: %d SHAKE/s from %s for %v; shake campaign %d/s, send campaign %d/s × %d recipients over %d servers",
		cfg.qps, start.Format(time.TimeOnly), cfg.duration, cfg.shakeRate, cfg.sendRate, cfg.recipients, len(s.servers))
	last := s.stats0
	last.at = start
	for t := start.Add(time.Second + 300*time.Millisecond); t.Before(s.loadEnd.Add(-time.Second)); t = t.Add(time.Second) {
		if err := s.sleep(ctx, time.Until(t)); err != nil {
			return err
		}
		st, err := s.pollStats()
		if err != nil {
			return fmt.Errorf("during the load: %w", err)
		}
		dt := st.at.Sub(last.at).Seconds()
		q := float64(st.Requests-last.Requests) / dt
		s.perSecond = append(s.perSecond, q)
		sys := s.smp.latest()
		s.Say("load %4.0fs  SHAKE %s/s (servers)  got %.0f/s  group envelopes %.0f/s  shares opened %.0f/s  conns %s  MemAvailable %s",
			st.at.Sub(start).Seconds(), harness.Thousands(int64(q)), float64(st.ShakeGot-last.ShakeGot)/dt, float64(st.Created-last.Created)/dt,
			float64(st.Opened-last.Opened)/dt, harness.Thousands(st.conns), harness.GiB(sys.MemAvailable))
		s.smp.addStats("load", st, last)
		last = st
	}
	// The last second: switch back to 0 on the load's last boundary.
	if err := s.sleep(ctx, time.Until(s.loadEnd.Add(-time.Second+20*time.Millisecond))); err != nil {
		return err
	}
	stop, err := s.setQPS(0)
	if err != nil {
		return err
	}
	if !stop.Equal(s.loadEnd) {
		s.note("the load clients switched to 0 at %s, not at %s: the load ran %v", stop.Format(time.TimeOnly), s.loadEnd.Format(time.TimeOnly), stop.Sub(start))
		s.loadEnd = stop
	}
	if err := s.sleep(ctx, time.Until(s.loadEnd.Add(500*time.Millisecond))); err != nil {
		return err
	}
	s.cpu1, s.busy1 = s.readCPU(), machineBusy()
	// The campaigns end with the load; then the last pushes are opened.
	s.smp.setPhase("tail")
	if err := s.waitCampaigns(ctx, 30*time.Second); err != nil {
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
	at := make([]time.Time, len(s.clients))
	err := forEach(len(s.clients), len(s.clients), func(i int) (err error) {
		at[i], err = s.clients[i].setQPS(qps)
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	first, last := at[0], at[0]
	for _, t := range at {
		if t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	if !first.Equal(last) {
		s.note("/qps?set=%d: the load clients switch between %s and %s, not on one second", qps, first.Format(time.TimeOnly), last.Format(time.TimeOnly))
	}
	return last, nil
}

// startCampaigns starts each server's share of the campaigns, sized to last
// the load's duration.
func (s *state) startCampaigns() error {
	cfg := &s.cfg
	secs := int(cfg.duration / time.Second)
	return forEach(len(s.servers), len(s.servers), func(i int) error {
		p := s.servers[i]
		if r := p.part.shakeRate; r > 0 {
			if _, err := p.srv.Admin.StartCampaign("shake", harness.ShakeCampaign(r, secs)); err != nil {
				return fmt.Errorf("server %d: %w", i, err)
			}
		}
		if r := p.part.sendRate; r > 0 {
			if _, err := p.srv.Admin.StartCampaign("send", harness.SendCampaign(r, secs, cfg.recipients)); err != nil {
				return fmt.Errorf("server %d: %w", i, err)
			}
		}
		return nil
	})
}

// waitCampaigns waits until every server's campaigns are done.
func (s *state) waitCampaigns(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		open := make([]int, len(s.servers))
		err := forEach(len(s.servers), 8, func(i int) error {
			list, _, err := s.servers[i].srv.Admin.Campaigns()
			for _, c := range list {
				if !c.Done {
					open[i]++
				}
			}
			return err
		})
		pending := 0
		for _, n := range open {
			pending += n
		}
		if pending == 0 && err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("campaigns not done %v after the load: %d pending, %v", timeout, pending, err)
		}
		if err := s.sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// finish ends the load clients (each drains, reconciles with its server and
// reports), checks every server's ledger and the sums, and stops the servers.
func (s *state) finish(ctx context.Context) error {
	s.smp.setPhase("drain")
	s.Say("SIGTERM to the load clients: each drains, reconciles with its own server's /stats and closes its connections")
	t0 := time.Now()
	for _, c := range s.clients {
		c.Signal(syscall.SIGTERM)
	}
	var errs []error
	for _, c := range s.clients {
		select {
		case <-c.Done():
		case <-time.After(time.Until(t0.Add(3 * time.Minute))):
			c.Signal(syscall.SIGKILL)
			errs = append(errs, fmt.Errorf("load client %d did not exit 3 minutes after SIGTERM; killed", c.part.index))
		}
		if err := c.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("load client %d: %v (see %s)", c.part.index, err, c.Log))
		}
		var err error
		if c.rep, err = c.ReadReport(); err != nil {
			errs = append(errs, fmt.Errorf("load client %d: %w", c.part.index, err))
		} else if !harness.Reconciled(c.rep) {
			errs = append(errs, fmt.Errorf("load client %d: reconciliation with server %d failed (see %s)", c.part.index, c.part.index, c.Report))
		}
	}
	s.Say("load clients exited %.1fs after SIGTERM", time.Since(t0).Seconds())

	// Every server's ledger, once its client has gone.
	s.smp.setPhase("ledger")
	errs = append(errs, forEach(len(s.servers), 8, func(i int) error {
		p := s.servers[i]
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
	s.srvTotals, s.cliTotals = serverTotals(s.servers), clientTotals(s.clients)
	s.summed = summedChecks(s.srvTotals, s.cliTotals)
	for _, c := range s.summed {
		if !c.OK() {
			errs = append(errs, fmt.Errorf("summed: %s", c))
		}
	}

	// SIGTERM to the servers, all at once; each must exit 0.
	s.smp.setPhase("stop")
	errs = append(errs, forEach(len(s.servers), len(s.servers), func(i int) error {
		p := s.servers[i]
		p.exitCode, p.exitErr = p.srv.Stop(30 * time.Second)
		return p.exitErr
	}))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.passed = ctx.Err() == nil
	return nil
}
