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

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// Memory estimate for the pre-flight check: per connection two kernel
// sockets, dentries, socket buffers and user space on both ends; per
// process a Go runtime.
const (
	estPerConn = 12 << 10
	estPerProc = 24 << 20
)

// state is the run as it goes; report.go writes it out.
type state struct {
	*harness.Run
	cfg     config
	started time.Time
	layout  []part
	pairs   []*pair // the servers started, each with its load client once it runs
	smp     *sampler
	notes   []string // what went wrong or is worth knowing, in order
	env     map[string]string

	sysStart harness.System
	sys      [3]harness.System // by reading, slab caches included

	launched, firstUp, rampDone time.Time
	loadStart, loadEnd          time.Time
	stats0, stats1              statSum
	load0, load1, hold0, hold1  cpuMark
	timeline                    []statRow
	perSecond                   []float64 // server-side SHAKEs per second of the load

	srvTotals, cliTotals totals
	summed               []harness.LedgerCheck
	passed               bool
	err                  error
}

func (s *state) note(format string, args ...any) {
	s.notes = append(s.notes, fmt.Sprintf(format, args...))
	s.Say("%s", s.notes[len(s.notes)-1])
}

// run is one million run; the error says what failed.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	r, err := harness.NewRun(cfg.out, "million-", "million", stdout, stderr)
	if err != nil {
		return err
	}
	s := &state{Run: r, cfg: cfg, started: time.Now(), env: map[string]string{}}
	defer s.killAll()
	for _, phase := range []func(context.Context) error{s.preflight, s.startServers, s.readMemory(readIdle), s.startClients,
		s.ramp, s.hold, s.readMemory(readRamped), s.load, s.readMemory(readEnd), s.finish} {
		if s.err = phase(ctx); s.err != nil {
			break
		}
	}
	if ctx.Err() != nil && s.err != nil {
		s.err = fmt.Errorf("%w (%v)", s.err, context.Cause(ctx))
	}
	s.killAll() // nothing left running while the report is written
	werr := s.write()
	s.Say("files in %s/", s.Dir)
	return errors.Join(s.err, werr)
}

// killAll kills every process still running: load clients first (a failed
// run needs no drain), then servers.
func (s *state) killAll() {
	for _, p := range s.pairs {
		if p.cli != nil {
			p.cli.Signal(syscall.SIGKILL)
			select {
			case <-p.cli.Done():
			case <-time.After(30 * time.Second):
			}
		}
	}
	for _, p := range s.pairs {
		p.srv.Kill()
	}
}

// preflight checks what this machine allows before starting anything:
// descriptors per process, local ports per (source, server) pair, files
// system-wide and memory; it records the settings it read (it changes none).
func (s *state) preflight(context.Context) error {
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
	var bad harness.Problems
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return err
	}
	most := s.layout[0].users.Len() // the first parts are the largest
	s.env["open files (hard limit, per process)"] = strconv.FormatUint(rl.Max, 10)
	// The server's margin covers the load client's (64).
	bad.If(uint64(most+harness.FDMargin) > rl.Max, "%d connections per server need %d descriptors, above the open-files limit %d: raise -servers (or lower -per-server)", most, most+harness.FDMargin, rl.Max)
	var lo, hi, used, unused, fileMax int64
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil && sscan(b, &lo, &hi) {
		ports, need := int(hi-lo+1), portsNeeded(s.layout)
		s.env["net.ipv4.ip_local_port_range"] = fmt.Sprintf("%d %d (%d ports per source address and server port)", lo, hi, ports)
		bad.If(need > ports, "a source address carries %d connections to one server port, above the %d local ports of net.ipv4.ip_local_port_range: give more -source addresses", need, ports)
	}
	if b, err := os.ReadFile("/proc/sys/fs/file-nr"); err == nil && sscan(b, &used, &unused, &fileMax) {
		s.env["fs.file-nr"] = fmt.Sprintf("%d allocated, file-max %d", used, fileMax)
		need := int64(2*cfg.conns + 1000)
		bad.If(fileMax-used < need, "the system's open files: %d in use of fs.file-max %d, and the run needs %d more (two sockets a connection)", used, fileMax, need)
	}
	for _, name := range []string{"net/ipv4/tcp_mem", "net/core/somaxconn", "net/ipv4/tcp_max_orphans", "net/ipv4/tcp_max_tw_buckets", "net/netfilter/nf_conntrack_max"} {
		if b, err := os.ReadFile("/proc/sys/" + name); err == nil {
			s.env[strings.ReplaceAll(name, "/", ".")] = strings.Join(strings.Fields(string(b)), " ")
		}
	}
	if s.sysStart, err = harness.ReadSystem(false); err != nil {
		return err
	}
	est, avail := int64(cfg.conns)*estPerConn+int64(2*cfg.servers)*estPerProc, s.sysStart.MemAvailable
	s.Say("%d connections over %d servers (%d–%d each) and %d load clients, sources %s; estimate %s of %s available",
		cfg.conns, cfg.servers, s.layout[len(s.layout)-1].users.Len(), most, cfg.servers, addrSpan(src), harness.GiB(est), harness.GiB(avail))
	bad.If(float64(est) > cfg.headroom*float64(avail), "the run needs about %s, above %.0f%% of the %s available (-max-mem-share)", harness.GiB(est), 100*cfg.headroom, harness.GiB(avail))
	for _, bin := range []string{cfg.Server(), cfg.Client()} {
		_, err := os.Stat(bin)
		bad.If(err != nil, "%v: run make build first", err)
	}
	return bad.Err()
}

// sscan reads whole numbers separated by white space.
func sscan(b []byte, v ...any) bool {
	n, _ := fmt.Sscan(string(b), v...)
	return n == len(v)
}

// startServers starts the servers, -start-jobs at a time.
func (s *state) startServers(ctx context.Context) error {
	cfg := &s.cfg
	s.smp = startSampler(ctx, s)
	s.smp.setPhase("start")
	s.Say("starting %d servers (%s, GOMAXPROCS=%d), %d at a time", cfg.servers, cfg.serverFlags, cfg.serverProcs, cfg.startJobs)
	pairs := make([]*pair, cfg.servers)
	err := forEach(cfg.servers, cfg.startJobs, func(i int) error {
		srv, err := harness.Start(ctx, harness.ServerConfig{Bin: cfg.Server(), Args: strings.Fields(cfg.serverFlags), Log: s.Path(fmt.Sprintf("server-%02d.log", i)),
			Echo: s.Stderr, StartTimeout: 30 * time.Second, Env: gomaxprocs(cfg.serverProcs), Spawn: timerSlack(cfg.serverSlack)})
		if err != nil {
			return fmt.Errorf("server %d: %w", i, err)
		}
		pairs[i] = &pair{part: s.layout[i], srv: srv}
		return nil
	})
	for _, p := range pairs {
		if p != nil {
			s.pairs = append(s.pairs, p)
			s.Step(fmt.Sprintf("server %d", p.index), strings.TrimSpace(strings.Join(gomaxprocs(cfg.serverProcs), " ")+" "+p.srv.CommandLine()))
		}
	}
	if err == nil {
		s.smp.setPIDs(s)
		first, last := s.pairs[0].srv, s.pairs[len(s.pairs)-1].srv
		s.Say("servers up: pids %d … %d, ports %s … %s", first.PID, last.PID, first.Listen, last.Listen)
	}
	return err
}

// startClients starts one load client per server at -qps 0, which million
// switches through its -control; -duration only bounds a client whose
// parent vanished without the kernel killing it.
func (s *state) startClients(ctx context.Context) error {
	cfg := &s.cfg
	ports, err := harness.FreePorts(len(s.pairs))
	if err != nil {
		return fmt.Errorf("control ports: %w", err)
	}
	duration := cfg.rampTimeout + cfg.hold + cfg.duration + 3*time.Minute
	s.smp.setPhase("ramp")
	s.launched = time.Now()
	s.Say("starting %d load clients (GOMAXPROCS=%d, %s), %d connects/s in all", len(s.pairs), cfg.clientProcs, cfg.clientFlags, cfg.rampRate)
	for i, p := range s.pairs {
		flags := []string{"-total-users", strconv.Itoa(cfg.conns), "-qps", "0", "-duration", duration.String(),
			"-connect-rate", strconv.Itoa(p.connectRate), "-control", ports[i]}
		// SIGTERM when ctx ends (the client drains, reconciles and reports), SIGKILL 60 s later.
		c, err := harness.StartClient(ctx, p.srv, harness.ClientConfig{
			Bin: cfg.Client(), Dir: s.Dir, Name: fmt.Sprintf("client-%02d", i), Users: p.users.String(), Flags: flags,
			Source: joinAddrs(p.sources, ","), More: cfg.clientFlags, Grace: 60 * time.Second,
			Env: gomaxprocs(cfg.clientProcs), Spawn: timerSlack(cfg.clientSlack),
		})
		if err != nil {
			return fmt.Errorf("load client %d: %w", i, err)
		}
		p.cli, p.control = c, ports[i]
		s.Steps.Add(c.Launched, fmt.Sprintf("load client %d", i), strings.TrimSpace(strings.Join(gomaxprocs(cfg.clientProcs), " ")+" "+c.CommandLine()), 0)
	}
	s.smp.setPIDs(s)
	return nil
}

// hold holds the connections idle for -hold, reading what that costs.
func (s *state) hold(ctx context.Context) error {
	s.smp.setPhase("hold")
	s.Say("holding %d connections idle for %v", s.cfg.conns, s.cfg.hold)
	s.hold0 = s.markCPU()
	err := s.sleep(ctx, s.cfg.hold)
	s.hold1 = s.markCPU()
	return err
}

// alive reports a process that ended before its time.
func (s *state) alive() error {
	for _, p := range s.pairs {
		if p.cli != nil && p.cli.Exited() {
			return fmt.Errorf("load client %d (pid %d) exited early: %v; see %s", p.index, p.cli.PID(), p.cli.Wait(), p.cli.Log)
		}
		select {
		case <-p.srv.Done():
			return fmt.Errorf("server %d (pid %d) exited early; see %s", p.index, p.srv.PID, p.srv.Log)
		default:
		}
	}
	return nil
}

// sleep waits d, watching the processes.
func (s *state) sleep(ctx context.Context, d time.Duration) error {
	for end := time.Now().Add(d); ; {
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
