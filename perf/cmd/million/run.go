package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"hongbao/perf/internal/harness"
)

// Descriptor margins beyond one per connection: a server's listener, admin
// listener and connections, epoll, log pipe and runtime; the load client's
// own margin is 64 (loadclient.fdMargin).
const (
	serverFdMargin = harness.FDMargin
	clientFdMargin = 64
)

// Memory estimate for the pre-flight check: per connection two kernel
// sockets (tcp_sock, inode, file, epoll item), dentries, socket buffers and
// user space on both ends; per process a Go runtime.
const (
	estPerConn = 12 << 10
	estPerProc = 24 << 20
)

// state is the run as it goes; report.go writes it out.
type state struct {
	*harness.Run
	cfg     config
	cmdline string
	started time.Time

	layout  []part
	servers []*serverProc
	clients []*clientProc
	smp     *sampler
	notes   []string // what went wrong or is worth knowing, in order
	env     map[string]string

	sysStart harness.System
	sys      [3]harness.System // by reading, slab caches included

	launched, firstUp, rampDone time.Time
	loadStart, loadEnd          time.Time
	stats0, stats1              statSum
	cpu0, cpu1                  cpuSum
	busy0, busy1                time.Duration
	holdCPU0, holdCPU1          cpuSum // the hold: what holding the connections idle costs
	holdBusy0, holdBusy1        time.Duration
	holdAt0, holdAt1            time.Time
	perSecond                   []float64 // server-side SHAKEs per second of the load

	srvTotals, cliTotals totals
	summed               []harness.LedgerCheck
	passed               bool
	err                  error
}

func (s *state) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.notes = append(s.notes, msg)
	s.Say("%s", msg)
}

// run is one million run; the error says what failed.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	r, err := harness.NewRun(cfg.out, "million-", "million", stdout, stderr)
	if err != nil {
		return err
	}
	s := &state{Run: r, cfg: cfg, started: time.Now(), cmdline: strings.Join(append([]string{"go run ./perf/cmd/million"}, os.Args[1:]...), " "), env: map[string]string{}}
	defer s.killAll()
	s.err = s.do(ctx)
	if ctx.Err() != nil && s.err != nil {
		s.err = fmt.Errorf("%w (%v)", s.err, context.Cause(ctx))
	}
	s.killAll() // before writing: a failed run leaves nothing running while we write
	if s.smp != nil {
		s.smp.stop()
	}
	werr := s.write()
	s.printSummary()
	s.Say("files in %s/", s.Dir)
	return errors.Join(s.err, werr)
}

// killAll kills every process still running: load clients first (SIGKILL:
// a failed run needs no drain), then servers. Each only once.
func (s *state) killAll() {
	for _, c := range s.clients {
		c.Signal(syscall.SIGKILL)
	}
	for _, c := range s.clients {
		select {
		case <-c.Done():
		case <-time.After(30 * time.Second):
		}
	}
	for _, p := range s.servers {
		p.srv.Kill()
	}
}

func (s *state) do(ctx context.Context) error {
	cfg := &s.cfg
	if err := s.preflight(); err != nil {
		return err
	}
	s.smp = startSampler(ctx, s)

	// 1. The servers.
	s.smp.setPhase("start")
	s.Say("starting %d servers (%s, GOMAXPROCS=%d), %d at a time", cfg.servers, cfg.serverFlags, cfg.serverProcs, cfg.startJobs)
	servers := make([]*serverProc, cfg.servers)
	err := forEach(cfg.servers, cfg.startJobs, func(i int) error {
		p := &serverProc{part: s.layout[i], args: strings.Fields(cfg.serverFlags)}
		srv, err := harness.Start(ctx, harness.ServerConfig{Bin: cfg.Server(), Args: p.args, Log: s.Path(fmt.Sprintf("server-%02d.log", i)),
			Echo: s.Stderr, StartTimeout: 30 * time.Second, Env: gomaxprocs(cfg.serverProcs), Spawn: timerSlack(cfg.serverSlack)})
		if err != nil {
			return fmt.Errorf("server %d: %w", i, err)
		}
		p.srv, servers[i] = srv, p
		return nil
	})
	for _, p := range servers {
		if p != nil {
			s.servers = append(s.servers, p)
			s.Step(fmt.Sprintf("server %d", p.part.index), strings.TrimSpace(strings.Join(gomaxprocs(cfg.serverProcs), " ")+" "+p.srv.CommandLine()))
		}
	}
	if err != nil {
		return err
	}
	s.smp.setPIDs(s)
	s.Say("servers up: pids %d … %d, ports %s … %s", s.servers[0].srv.PID, s.servers[len(s.servers)-1].srv.PID, s.servers[0].srv.Listen, s.servers[len(s.servers)-1].srv.Listen)

	// 2. Idle servers, then the kernel before the ramp.
	if err := s.readMemory(readIdle); err != nil {
		return err
	}

	// 3. The load clients, at -qps 0: the ramp.
	if err := s.startClients(ctx); err != nil {
		return err
	}
	s.smp.setPIDs(s)
	if err := s.ramp(ctx); err != nil {
		return err
	}

	// 4. Hold, then read memory with every connection up and idle.
	s.smp.setPhase("hold")
	s.Say("holding %d connections idle for %v", cfg.conns, cfg.hold)
	s.holdCPU0, s.holdBusy0, s.holdAt0 = s.readCPU(), machineBusy(), time.Now()
	if err := s.sleep(ctx, cfg.hold); err != nil {
		return err
	}
	s.holdCPU1, s.holdBusy1, s.holdAt1 = s.readCPU(), machineBusy(), time.Now()
	s.smp.setPhase("measure")
	if err := s.readMemory(readRamped); err != nil {
		return err
	}
	s.sayMemory("after the ramp", readRamped)

	// 5. The load and the campaigns.
	if err := s.load(ctx); err != nil {
		return err
	}

	// 6. Memory at the end, with the connections still up.
	s.smp.setPhase("measure")
	if err := s.readMemory(readEnd); err != nil {
		return err
	}
	s.sayMemory("at the end of the load", readEnd)

	// 7. The load clients drain, reconcile with their servers and report.
	return s.finish(ctx)
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
	if pr := readInts("/proc/sys/net/ipv4/ip_local_port_range"); len(pr) == 2 {
		ports := int(pr[1] - pr[0] + 1)
		s.env["net.ipv4.ip_local_port_range"] = fmt.Sprintf("%d %d (%d ports per source address and server port)", pr[0], pr[1], ports)
		if need := portsNeeded(s.layout); need > ports {
			errs = append(errs, fmt.Errorf("a source address carries %d connections to one server port, above the %d local ports of net.ipv4.ip_local_port_range: give more -source addresses", need, ports))
		}
	}
	if fnr := readInts("/proc/sys/fs/file-nr"); len(fnr) == 3 {
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
	if s.sysStart, err = harness.ReadSystem(false); err != nil {
		return err
	}
	est := int64(cfg.conns)*estPerConn + int64(2*cfg.servers)*estPerProc
	s.Say("%d connections over %d servers (%d–%d each) and %d load clients, sources %s; estimate %s of %s available",
		cfg.conns, cfg.servers, s.layout[len(s.layout)-1].users.Len(), most, cfg.servers, addrSpan(src), harness.GiB(est), harness.GiB(s.sysStart.MemAvailable))
	if float64(est) > cfg.headroom*float64(s.sysStart.MemAvailable) {
		errs = append(errs, fmt.Errorf("the run needs about %s, above %.0f%% of the %s available (-max-mem-share)", harness.GiB(est), 100*cfg.headroom, harness.GiB(s.sysStart.MemAvailable)))
	}
	for _, bin := range []string{cfg.Server(), cfg.Client()} {
		if _, err := os.Stat(bin); err != nil {
			errs = append(errs, fmt.Errorf("%v: run make build first", err))
		}
	}
	return errors.Join(errs...)
}

// readInts reads a file of whole numbers separated by white space; nil
// when it cannot.
func readInts(path string) []int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []int64
	for _, f := range strings.Fields(string(b)) {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil
		}
		out = append(out, v)
	}
	return out
}

// startClients starts one load client per server.
func (s *state) startClients(ctx context.Context) error {
	cfg := &s.cfg
	ports, err := harness.FreePorts(len(s.servers))
	if err != nil {
		return fmt.Errorf("control ports: %w", err)
	}
	clientDuration := cfg.rampTimeout + cfg.hold + cfg.duration + 3*time.Minute
	s.smp.setPhase("ramp")
	s.launched = time.Now()
	s.Say("starting %d load clients (GOMAXPROCS=%d, %s), %d connects/s in all", len(s.servers), cfg.clientProcs, cfg.clientFlags, cfg.rampRate)
	for i, p := range s.servers {
		c, err := startClient(ctx, cfg, s.Dir, p.part, p.srv, ports[i], clientDuration)
		if err != nil {
			return err
		}
		s.clients = append(s.clients, c)
		s.Steps.Add(c.Launched, fmt.Sprintf("load client %d", p.part.index), strings.TrimSpace(strings.Join(gomaxprocs(cfg.clientProcs), " ")+" "+c.CommandLine()), 0)
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
		if c.Exited() {
			return fmt.Errorf("load client %d (pid %d) exited early: %v; its log ends:\n%s", c.part.index, c.PID(), c.Wait(), c.tail(15))
		}
	}
	for _, p := range s.servers {
		select {
		case <-p.srv.Done():
			return fmt.Errorf("server %d (pid %d) exited early; see %s", p.part.index, p.srv.PID, p.srv.Log)
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
