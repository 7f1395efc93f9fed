package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// The memory readings: servers idle before the ramp, every connection up
// and idle after it, and at the end of the load.
const (
	readIdle = iota
	readRamped
	readEnd
)

// readings names them.
var readings = [3]string{"servers idle", "after the ramp", "at the end of the load"}

// pair is one server process and its load client.
type pair struct {
	part
	srv      *harness.Server
	mem      [3]harness.Memory // the server's, by reading
	stats    harness.Stats     // after the load client left
	camps    []harness.Campaign
	checks   []harness.LedgerCheck
	exitCode int

	cli     *harness.Client // nil until it runs
	control string          // host:port of its -control API
	rss     [3]int64        // the load client's VmRSS by reading (none idle)
	rep     *loadclient.Report
}

// ok says whether the server's ledger was read and holds.
func (p *pair) ok() bool { return len(p.checks) > 0 && len(harness.FailedChecks(p.checks)) == 0 }

// forEach runs f(0) … f(n−1), jobs at a time, and joins their errors.
func forEach(n, jobs int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, max(jobs, 1))
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// gomaxprocs is the environment of a child with n Ps (0: the Go default).
func gomaxprocs(n int) []string {
	if n <= 0 {
		return nil
	}
	return []string{"GOMAXPROCS=" + strconv.Itoa(n)}
}

var controlClient = &http.Client{Timeout: 5 * time.Second}

// setQPS asks p's load client for a total rate of qps from the next whole
// second at least 50 ms away, and returns that second.
func (p *pair) setQPS(qps int) (time.Time, error) {
	resp, err := controlClient.Get(fmt.Sprintf("http://%s/qps?set=%d", p.control, qps))
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var ans struct {
		From time.Time `json:"from"`
	}
	if resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, body)
	} else if err = json.Unmarshal(body, &ans); err != nil {
		err = fmt.Errorf("answer %q: %w", body, err)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("client %d: /qps?set=%d: %w", p.index, qps, err)
	}
	return ans.From, nil
}

// statSum is every server's /stats added up.
type statSum struct {
	totals
	at            time.Time
	conns, logins int64
	full          int // servers with all their users logged in
	per           []harness.Stats
}

// pollStats reads every server's /stats at once.
func (s *state) pollStats() (statSum, error) {
	sum := statSum{at: time.Now(), per: make([]harness.Stats, len(s.pairs))}
	err := forEach(len(s.pairs), len(s.pairs), func(i int) (err error) {
		sum.per[i], _, err = s.pairs[i].srv.Admin.Stats()
		return err
	})
	for i, st := range sum.per {
		sum.add(&st)
		sum.conns += st.Connections
		sum.logins += st.Logins
		if n := int64(s.pairs[i].users.Len()); st.Connections == n && st.Logins >= n {
			sum.full++
		}
	}
	return sum, err
}

// statRow is one second of the servers' /stats, added up, as rates a
// second: timeline.csv.
type statRow struct {
	T                                 float64
	Phase                             string
	Conns, Logins                     int64
	Shakes, Got, Created, Opened, New float64
}

// second reads every server's /stats and records the second since last.
func (s *state) second(phase string, last statSum) (statSum, statRow, error) {
	cur, err := s.pollStats()
	dt := max(cur.at.Sub(last.at).Seconds(), 1e-3)
	rate := func(a, b int64) float64 { return float64(a-b) / dt }
	r := statRow{T: cur.at.Sub(s.started).Seconds(), Phase: phase, Conns: cur.conns, Logins: cur.logins, New: rate(cur.conns, last.conns),
		Shakes: rate(cur.Requests, last.Requests), Got: rate(cur.ShakeGot, last.ShakeGot), Created: rate(cur.Created, last.Created), Opened: rate(cur.Opened, last.Opened)}
	if err == nil {
		s.timeline = append(s.timeline, r)
	}
	return cur, r, err
}

// cpuMark is the CPU time the servers, the load clients and the whole
// machine have used by at.
type cpuMark struct {
	at                     time.Time
	servers, clients, busy time.Duration
}

func (s *state) markCPU() cpuMark {
	m := cpuMark{at: time.Now()}
	m.busy, _ = harness.MachineBusy()
	for _, p := range s.pairs {
		d, _ := harness.CPUTime(p.srv.PID)
		m.servers += d
		if p.cli != nil {
			d, _ = harness.CPUTime(p.cli.PID())
			m.clients += d
		}
	}
	return m
}

// cores is how many cores each was busy from a to b.
func cores(a, b cpuMark) (servers, clients, machine float64) {
	d := b.at.Sub(a.at).Seconds()
	if d <= 0 {
		return 0, 0, 0
	}
	return (b.servers - a.servers).Seconds() / d, (b.clients - a.clients).Seconds() / d, (b.busy - a.busy).Seconds() / d
}

// readMemory is a phase that reads the machine first, then the load
// clients' RSS, then each server's memory after a GC (the /metrics scrape
// lists /proc/PID/fd, which grows the kernel's dentry cache).
func (s *state) readMemory(at int) func(context.Context) error {
	return func(context.Context) error {
		s.smp.setPhase("measure")
		var err error
		if s.sys[at], err = harness.ReadSystem(true); err != nil {
			return err
		}
		for _, p := range s.pairs {
			if p.cli != nil {
				if p.rss[at], err = harness.RSS(p.cli.PID()); err != nil {
					return err
				}
			}
		}
		err = forEach(len(s.pairs), 4, func(i int) (err error) {
			s.pairs[i].mem[at], err = harness.ReadGoMemory(s.pairs[i].srv)
			return err
		})
		if err != nil || at == readIdle {
			return err
		}
		srss, sheap, crss := s.memory(at)
		n, sys, idle, gib := s.cfg.conns, s.sys[at], s.sys[readIdle], harness.GiB
		s.Say("memory %s: servers RSS %s (%s/conn), Go heap+stacks %s; load clients RSS %s (%s/user); Slab %s (+%s, %s/conn), SUnreclaim +%s; MemAvailable %s (−%s since the start)",
			readings[at], harness.MiB(srss), harness.Per(srss, n), harness.MiB(sheap), harness.MiB(crss), harness.Per(crss, n), gib(sys.Slab), gib(sys.Slab-idle.Slab),
			harness.Per(sys.Slab-idle.Slab, n), gib(sys.SUnreclaim-idle.SUnreclaim), gib(sys.MemAvailable), gib(s.sysStart.MemAvailable-sys.MemAvailable))
		return nil
	}
}

// memory adds up one reading of every process: the servers' RSS and Go
// heap + stacks, the load clients' RSS.
func (s *state) memory(at int) (srss, sheap, crss int64) {
	for _, p := range s.pairs {
		srss += p.mem[at].RSS
		sheap += p.mem[at].HeapStacks()
		crss += p.rss[at]
	}
	return srss, sheap, crss
}
