package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"hongbao/perf/internal/harness"
)

// Descriptor margins beyond one per connection: a server's listener, admin
// listener and connections, epoll, log pipe and runtime; the load client's
// own margin is 64 (loadclient.fdMargin).
const (
	serverFdMargin = 100
	clientFdMargin = 64
)

// Memory estimate per connection for the pre-flight check: two kernel
// sockets of ~3.5 KiB each (tcp_sock, inode, file, epoll item), the dentries
// and proc inodes of whatever lists /proc/PID/fd, socket buffers, and some
// user space on both ends (~11.5 KiB measured); and per process, a Go
// runtime.
const (
	estPerConn = 12 << 10
	estPerProc = 24 << 20
)

// state is the run as it goes; report.go writes it out.
type state struct {
	cfg     config
	dir     string
	out     io.Writer
	cmdline string
	started time.Time

	layout  []part
	servers []*serverProc
	clients []*clientProc
	smp     *sampler
	notes   []string // what went wrong or is worth knowing, in order
	env     map[string]string

	sysStart, sysBefore, sysRamped, sysEnd system
	kernBefore, kernRamped                 harness.Kernel

	launched, firstUp, rampDone time.Time
	loadStart, loadEnd          time.Time
	loadSkew                    []time.Time // the seconds the clients reported for the rate switch
	stats0, stats1              statSum
	cpu0, cpu1                  cpuSum
	busy0, busy1                time.Duration
	holdCPU0, holdCPU1          cpuSum // the hold: what holding the connections idle costs
	holdBusy0, holdBusy1        time.Duration
	holdAt0, holdAt1            time.Time
	perSecond                   []float64 // server-side SHAKEs per second of the load

	srvTotals, cliTotals totals
	summed               []check
	passed               bool
	err                  error
}

func (s *state) say(format string, args ...any) {
	fmt.Fprintf(s.out, "million: "+format+"\n", args...)
}

func (s *state) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.notes = append(s.notes, msg)
	s.say("%s", msg)
}

// run is one million run; the error says what failed.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	s := &state{cfg: cfg, out: stdout, started: time.Now(), cmdline: strings.Join(append([]string{"go run ./perf/cmd/million"}, os.Args[1:]...), " "), env: map[string]string{}}
	s.dir = filepath.Join(cfg.out, "million-"+s.started.Format("20060102-150405"))
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	defer s.killAll()
	s.err = s.do(ctx, stderr)
	if ctx.Err() != nil && s.err != nil {
		s.err = fmt.Errorf("%w (%v)", s.err, context.Cause(ctx))
	}
	s.killAll() // before writing: a failed run leaves nothing running while we write
	if s.smp != nil {
		s.smp.stop()
	}
	werr := s.write()
	s.printSummary()
	s.say("files in %s/", s.dir)
	return errors.Join(s.err, werr)
}

// killAll kills every process still running: load clients first (SIGKILL:
// a failed run needs no drain), then servers. Each only once.
func (s *state) killAll() {
	for _, c := range s.clients {
		c.signal(syscall.SIGKILL)
	}
	for _, c := range s.clients {
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
		}
	}
	for _, p := range s.servers {
		p.srv.Kill()
	}
}

func (s *state) do(ctx context.Context, stderr io.Writer) error {
	cfg := &s.cfg
	if err := s.preflight(); err != nil {
		return err
	}
	s.smp = startSampler(s)

	// 1. The servers.
	s.smp.setPhase("start")
	s.say("starting %d servers (%s, GOMAXPROCS=%d), %d at a time", cfg.servers, cfg.serverFlags, cfg.serverProcs, cfg.startJobs)
	if cfg.serverProcs > 0 {
		os.Setenv("GOMAXPROCS", strconv.Itoa(cfg.serverProcs)) // the servers inherit it
	}
	s.servers = make([]*serverProc, cfg.servers)
	var mu sync.Mutex
	err := forEach(cfg.servers, cfg.startJobs, func(i int) error {
		p := &serverProc{part: s.layout[i], args: strings.Fields(cfg.serverFlags), log: filepath.Join(s.dir, fmt.Sprintf("server-%02d.log", i))}
		var srv *harness.Server
		err := withTimerSlack(cfg.serverSlack, func() (err error) {
			srv, err = harness.Start(ctx, harness.ServerConfig{Bin: filepath.Join(cfg.bin, "server"), Args: p.args, Log: p.log, Echo: stderr, StartTimeout: 30 * time.Second})
			return err
		})
		if err != nil {
			return fmt.Errorf("server %d: %w", i, err)
		}
		p.srv = srv
		mu.Lock()
		s.servers[i] = p
		mu.Unlock()
		return nil
	})
	if err != nil {
		s.servers = compact(s.servers)
		return err
	}
	os.Unsetenv("GOMAXPROCS")
	s.smp.setPIDs(s.pids())
	s.say("servers up: pids %d … %d, ports %s … %s", s.servers[0].srv.PID, s.servers[len(s.servers)-1].srv.PID, s.servers[0].srv.Listen, s.servers[len(s.servers)-1].srv.Listen)

	// 2. Idle servers, then the kernel before the ramp.
	if err := forEach(len(s.servers), 4, func(i int) (err error) {
		s.servers[i].idle, err = serverMemory(s.servers[i].srv)
		return err
	}); err != nil {
		return err
	}
	if s.kernBefore, err = harness.ReadKernel(); err != nil {
		return err
	}
	if s.sysBefore, err = readSystem(); err != nil {
		return err
	}

	// 3. The load clients, at -qps 0: the ramp.
	if err := s.startClients(ctx); err != nil {
		return err
	}
	s.smp.setPIDs(s.pids())
	if err := s.ramp(ctx); err != nil {
		return err
	}

	// 4. Hold, then read memory with every connection up and idle.
	s.smp.setPhase("hold")
	s.say("holding %d connections idle for %v", cfg.conns, cfg.hold)
	s.holdCPU0, s.holdBusy0, s.holdAt0 = s.readCPU(), machineBusy(), time.Now()
	if err := s.sleep(ctx, cfg.hold); err != nil {
		return err
	}
	s.holdCPU1, s.holdBusy1, s.holdAt1 = s.readCPU(), machineBusy(), time.Now()
	s.smp.setPhase("measure")
	if err := s.readMemory(&s.sysRamped, &s.kernRamped, func(p *serverProc) *procMem { return &p.ramped }, func(c *clientProc) *procMem { return &c.ramped }); err != nil {
		return err
	}
	s.sayMemory("after the ramp", s.sysRamped, func(p *serverProc) procMem { return p.ramped }, func(c *clientProc) procMem { return c.ramped })

	// 5. The load and the campaigns.
	if err := s.load(ctx); err != nil {
		return err
	}

	// 6. Memory at the end, with the connections still up.
	s.smp.setPhase("measure")
	var kernEnd harness.Kernel
	if err := s.readMemory(&s.sysEnd, &kernEnd, func(p *serverProc) *procMem { return &p.end }, func(c *clientProc) *procMem { return &c.end }); err != nil {
		return err
	}
	s.sayMemory("at the end of the load", s.sysEnd, func(p *serverProc) procMem { return p.end }, func(c *clientProc) procMem { return c.end })

	// 7. The load clients drain, reconcile with their servers and report.
	return s.finish(ctx)
}

func compact[T any](xs []*T) []*T {
	var out []*T
	for _, x := range xs {
		if x != nil {
			out = append(out, x)
		}
	}
	return out
}

// preflight checks what this machine allows before starting anything:
// descriptors per process, local ports per (source, server) pair, files
// system-wide and memory; it records the settings it read (it changes none).
func (s *state) preflight() error {
	cfg := &s.cfg
	var src []netip.Addr
	var err error
	if cfg.source == "auto" {
		src, err = autoSources(cfg.servers)
	} else if cfg.source != "" {
		src, err = harness.ParseLoopbackSources(cfg.source)
	}
	if err != nil {
		return err
	}
	s.layout = planParts(cfg.conns, cfg.servers, cfg.rampRate, cfg.shakeRate, cfg.sendRate, src)
	var errs []error
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return err
	}
	most := s.layout[0].users.Len() // the first parts are the largest
	s.env["open files (hard limit, per process)"] = strconv.FormatUint(rl.Max, 10)
	if uint64(most+serverFdMargin) > rl.Max {
		errs = append(errs, fmt.Errorf("%d connections per server need %d descriptors, above the open-files limit %d: raise -servers (or lower -per-server)", most, most+serverFdMargin, rl.Max))
	}
	if uint64(most+clientFdMargin) > rl.Max {
		errs = append(errs, fmt.Errorf("%d users per load client need %d descriptors, above the open-files limit %d", most, most+clientFdMargin, rl.Max))
	}
	if pr, err := readInts("/proc/sys/net/ipv4/ip_local_port_range"); err == nil && len(pr) == 2 {
		ports := int(pr[1] - pr[0] + 1)
		s.env["net.ipv4.ip_local_port_range"] = fmt.Sprintf("%d %d (%d ports per source address and server port)", pr[0], pr[1], ports)
		if need := portsNeeded(s.layout); need > ports {
			errs = append(errs, fmt.Errorf("a source address carries %d connections to one server port, above the %d local ports of net.ipv4.ip_local_port_range: give more -source addresses", need, ports))
		}
	}
	if fnr, err := readInts("/proc/sys/fs/file-nr"); err == nil && len(fnr) == 3 {
		s.env["fs.file-nr"] = fmt.Sprintf("%d allocated, file-max %d", fnr[0], fnr[2])
		if need := int64(2*cfg.conns + 1000); fnr[2]-fnr[0] < need {
			errs = append(errs, fmt.Errorf("the system's open files: %d in use of fs.file-max %d, and the run needs %d more (two sockets a connection)", fnr[0], fnr[2], need))
		}
	}
	for _, name := range []string{"net/ipv4/tcp_mem", "net/core/somaxconn", "net/ipv4/tcp_max_orphans", "net/ipv4/tcp_max_tw_buckets", "net/netfilter/nf_conntrack_max"} {
		if b, err := os.ReadFile("/proc/sys/" + name); err == nil {
			s.env[strings.ReplaceAll(name, "/", ".")] = strings.Join(strings.Fields(string(b)), " ")
		}
	}
	sys, err := readSystem()
	if err != nil {
		return err
	}
	s.sysStart = sys
	est := int64(cfg.conns)*estPerConn + int64(2*cfg.servers)*estPerProc
	s.say("%d connections over %d servers (%d–%d each) and %d load clients, sources %s; estimate %s of %s available",
		cfg.conns, cfg.servers, s.layout[len(s.layout)-1].users.Len(), most, cfg.servers, addrSpan(src), gib(est), gib(sys.MemAvailable))
	if float64(est) > cfg.headroom*float64(sys.MemAvailable) {
		errs = append(errs, fmt.Errorf("the run needs about %s, above %.0f%% of the %s available (-max-mem-share)", gib(est), 100*cfg.headroom, gib(sys.MemAvailable)))
	}
	for _, name := range []string{"server", "loadclient"} {
		if _, err := os.Stat(filepath.Join(cfg.bin, name)); err != nil {
			errs = append(errs, fmt.Errorf("%v: run make build first", err))
		}
	}
	return errors.Join(errs...)
}

// startClients starts one load client per server.
func (s *state) startClients(ctx context.Context) error {
	cfg := &s.cfg
	ports, err := freePorts(len(s.servers))
	if err != nil {
		return fmt.Errorf("control ports: %w", err)
	}
	// They run until million ends them; this only bounds a client whose
	// parent vanished without the kernel killing it.
	clientDuration := cfg.rampTimeout + cfg.hold + cfg.duration + 3*time.Minute
	s.smp.setPhase("ramp")
	s.launched = time.Now()
	s.say("starting %d load clients (GOMAXPROCS=%d, %s), %d connects/s in all", len(s.servers), cfg.clientProcs, cfg.clientFlags, cfg.rampRate)
	for i, p := range s.servers {
		c, err := startClient(ctx, cfg, s.dir, p.part, p.srv, ports[i], clientDuration)
		if err != nil {
			return err
		}
		s.clients = append(s.clients, c)
	}
	return nil
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
	sum := statSum{at: time.Now(), per: make([]harness.Stats, len(s.servers))}
	err := forEach(len(s.servers), len(s.servers), func(i int) (err error) {
		sum.per[i], _, err = s.servers[i].srv.Admin.Stats()
		return err
	})
	for i, st := range sum.per {
		sum.add(&st)
		sum.conns += st.Connections
		sum.logins += st.Logins
		n := int64(s.servers[i].part.users.Len())
		if st.Connections == n && st.Logins >= n {
			sum.full++
		}
	}
	return sum, err
}

// alive reports a process that ended before its time.
func (s *state) alive() error {
	for _, c := range s.clients {
		if c.exited() {
			return fmt.Errorf("load client %d (pid %d) exited early: %v; its log ends:\n%s", c.part.index, c.cmd.Process.Pid, c.err, c.tail(15))
		}
	}
	for _, p := range s.servers {
		select {
		case <-p.srv.Done():
			return fmt.Errorf("server %d (pid %d) exited early; see %s", p.part.index, p.srv.PID, p.log)
		default:
		}
	}
	return nil
}

// sleep waits d, watching the processes.
func (s *state) sleep(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		if err := s.alive(); err != nil {
			return err
		}
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(left, 500*time.Millisecond)):
		}
	}
}

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
		s.say("ramp %6.1fs  %s/%s up (%5.1f%%)  %s/s  logins %s  servers full %d/%d  MemAvailable %s  Slab +%s  conntrack %d",
			st.at.Sub(s.launched).Seconds(), thousands(st.conns), thousands(int64(cfg.conns)), 100*float64(st.conns)/float64(cfg.conns),
			thousands(int64(rate)), thousands(st.logins), st.full, len(s.servers), gib(sys.MemAvailable), gib(sys.Slab-s.sysBefore.Slab), sys.Conntrack)
		s.smp.addStats("ramp", st, last)
		last = st
		if st.full == len(s.servers) {
			s.rampDone = st.at
			s.say("ramp done: %s connections in %.1fs from the launch of the load clients (%.1fs from the first connection up), %s connects/s on average",
				thousands(st.conns), s.rampDone.Sub(s.launched).Seconds(), s.rampDone.Sub(s.firstUp).Seconds(),
				thousands(int64(float64(st.conns)/s.rampDone.Sub(s.launched).Seconds())))
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

// readMemory reads the kernel first, then the load clients' RSS, then each
// server's memory after a GC (the /metrics scrape lists /proc/PID/fd, which
// grows the kernel's dentry cache).
func (s *state) readMemory(sys *system, kern *harness.Kernel, srv func(*serverProc) *procMem, cli func(*clientProc) *procMem) error {
	var err error
	if *kern, err = harness.ReadKernel(); err != nil {
		return err
	}
	if *sys, err = readSystem(); err != nil {
		return err
	}
	for _, c := range s.clients {
		if cli(c).RSS, err = harness.RSS(c.cmd.Process.Pid); err != nil {
			return err
		}
	}
	return forEach(len(s.servers), 4, func(i int) (err error) {
		*srv(s.servers[i]), err = serverMemory(s.servers[i].srv)
		return err
	})
}

// memory adds up one reading of every process: the servers' RSS and Go
// heap + stacks, the load clients' RSS.
func (s *state) memory(srv func(*serverProc) procMem, cli func(*clientProc) procMem) (srss, sheap, crss int64) {
	for _, p := range s.servers {
		m := srv(p)
		srss += m.RSS
		sheap += m.HeapInuse + m.StackInuse
	}
	for _, c := range s.clients {
		crss += cli(c).RSS
	}
	return srss, sheap, crss
}

func (s *state) sayMemory(when string, sys system, srv func(*serverProc) procMem, cli func(*clientProc) procMem) {
	srss, sheap, crss := s.memory(srv, cli)
	n := s.cfg.conns
	s.say("memory %s: servers RSS %s (%s/conn), Go heap+stacks %s; load clients RSS %s (%s/user); Slab %s (+%s, %s/conn), SUnreclaim +%s; MemAvailable %s (−%s since the start)",
		when, mib(srss), per(srss, n), mib(sheap), mib(crss), per(crss, n), gib(sys.Slab), gib(sys.Slab-s.sysBefore.Slab), per(sys.Slab-s.sysBefore.Slab, n),
		gib(sys.SUnreclaim-s.sysBefore.SUnreclaim), gib(sys.MemAvailable), gib(s.sysStart.MemAvailable-sys.MemAvailable))
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
		d, _ := harness.CPUTime(p.cmd.Process.Pid)
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
	s.say("load: %d SHAKE/s from %s for %v; shake campaign %d/s, send campaign %d/s × %d recipients over %d servers",
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
		s.say("load %4.0fs  SHAKE %s/s (servers)  got %.0f/s  group envelopes %.0f/s  shares opened %.0f/s  conns %s  MemAvailable %s",
			st.at.Sub(start).Seconds(), thousands(int64(q)), float64(st.ShakeGot-last.ShakeGot)/dt, float64(st.Created-last.Created)/dt,
			float64(st.Opened-last.Opened)/dt, thousands(st.conns), gib(sys.MemAvailable))
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
	s.say("SIGTERM to the load clients: each drains, reconciles with its own server's /stats and closes its connections")
	t0 := time.Now()
	for _, c := range s.clients {
		c.signal(syscall.SIGTERM)
	}
	var errs []error
	for _, c := range s.clients {
		select {
		case <-c.done:
		case <-time.After(time.Until(t0.Add(3 * time.Minute))):
			c.signal(syscall.SIGKILL)
			<-c.done
			errs = append(errs, fmt.Errorf("load client %d did not exit 3 minutes after SIGTERM; killed", c.part.index))
		}
		if c.err != nil {
			errs = append(errs, fmt.Errorf("load client %d: %v (see %s)", c.part.index, c.err, c.log))
		}
		if err := c.readReport(); err != nil {
			errs = append(errs, fmt.Errorf("load client %d: %w", c.part.index, err))
		} else if !reconciled(c.rep) {
			errs = append(errs, fmt.Errorf("load client %d: reconciliation with server %d failed (see %s)", c.part.index, c.part.index, c.report))
		}
	}
	s.say("load clients exited %.1fs after SIGTERM", time.Since(t0).Seconds())

	// Every server's ledger, once its client has gone.
	s.smp.setPhase("ledger")
	err := forEach(len(s.servers), 8, func(i int) error {
		p := s.servers[i]
		if _, err := p.srv.Admin.WaitConnections(0, false, 60*time.Second); err != nil {
			return fmt.Errorf("server %d after its load client left: %w", i, err)
		}
		// Stages may still be passing the last events on: retry for a second.
		for deadline := time.Now().Add(time.Second); ; time.Sleep(50 * time.Millisecond) {
			st, _, err := p.srv.Admin.Stats()
			if err != nil {
				return fmt.Errorf("server %d: %w", i, err)
			}
			camps, _, err := p.srv.Admin.Campaigns()
			if err != nil {
				return fmt.Errorf("server %d: %w", i, err)
			}
			p.stats, p.camps, p.checks = st, camps, ledgerChecks(&st, camps)
			if allOK(p.checks) || time.Now().After(deadline) {
				break
			}
		}
		if !allOK(p.checks) {
			var bad []string
			for _, c := range p.checks {
				if !c.OK() {
					bad = append(bad, c.String())
				}
			}
			return fmt.Errorf("server %d ledger: %s", i, strings.Join(bad, "; "))
		}
		return nil
	})
	errs = append(errs, err)
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
