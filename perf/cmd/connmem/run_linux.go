package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// fdMargin is what this process needs beyond one descriptor per
// connection: stdio, the server's log pipe, the admin HTTP connection, the
// runtime's epoll and eventfd.
const fdMargin = 64

// result is one mode's three readings.
type result struct {
	mode                string
	login               time.Duration // to log in every connection
	idle, loaded, after harness.Memory
}

func run(ctx context.Context, cfg config) error {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return os.NewSyscallError("getrlimit", err)
	}
	if uint64(cfg.conns)+fdMargin > rl.Cur {
		return fmt.Errorf("-conns=%d needs %d descriptors in this process (and as many in the server); the open-files limit is %d", cfg.conns, cfg.conns+fdMargin, rl.Cur)
	}
	r, err := harness.NewRun(cfg.out, "connmem-", "connmem", os.Stdout, os.Stderr)
	if err != nil {
		return err
	}
	var results []result
	for _, mode := range cfg.modes {
		res, err := measure(ctx, cfg, r, mode)
		if err != nil {
			return fmt.Errorf("-ingress %s: %w", mode, err)
		}
		results = append(results, res)
	}
	md := report(cfg.conns, results).Markdown()
	fmt.Print("\n" + md)
	r.Say("table and server logs in %s/", r.Dir)
	return errors.Join(os.WriteFile(r.Path("connmem.md"), []byte(md), 0o644), r.WriteCommands())
}

// measure runs one server with -ingress mode through idle, loaded and
// after-close readings.
func measure(ctx context.Context, cfg config, run *harness.Run, mode string) (r result, err error) {
	r.mode = mode
	srv, err := run.StartServer(ctx, "server-"+mode+".log", harness.ServerConfig{
		Bin: filepath.Join(cfg.bin, "server"), Args: append([]string{"-ingress", mode}, strings.Fields(cfg.server)...)})
	if err != nil {
		return r, err
	}
	defer srv.Kill()
	run.Say("-ingress %s: server pid %d on %s", mode, srv.PID, srv.Listen)
	read := func(what string, m *harness.Memory) (err error) {
		if harness.Sleep(ctx, cfg.settle); ctx.Err() != nil {
			return ctx.Err()
		}
		if *m, err = harness.ReadMemory(srv); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		run.Say("  %-26s RSS %s, heap %s + stacks %s, %d goroutines, kernel slab %s, %d TCP sockets; GET /metrics %v",
			what, harness.MiB(m.RSS), harness.MiB(m.HeapInuse), harness.MiB(m.StackInuse), m.Goroutines, harness.MiB(m.System.Slab), m.System.TCP["inuse"], m.Scrape.Round(100*time.Microsecond))
		return nil
	}
	d := &harness.Dialer{Server: netip.MustParseAddrPort(srv.Listen), Sources: cfg.sources, Timeout: 10 * time.Second}
	if cfg.warm {
		if err := warmRings(run, d, uint32(cfg.conns)+1); err != nil {
			return r, fmt.Errorf("warming the rings: %w", err)
		}
		if _, err := srv.Admin.WaitConnections(0, false, 30*time.Second); err != nil {
			return r, fmt.Errorf("after warming the rings: %w", err)
		}
	}
	if err := read("idle", &r.idle); err != nil {
		return r, err
	}
	t0 := time.Now()
	fds, err := d.LoginMany(1, cfg.conns, cfg.workers, func(n int) {
		if n%5000 == 0 {
			run.Say("  %d logged in", n)
		}
	})
	defer harness.CloseAll(fds)
	if err != nil {
		return r, err
	}
	r.login = time.Since(t0)
	if _, err := srv.Admin.WaitConnections(int64(cfg.conns), true, 60*time.Second); err != nil {
		return r, err
	}
	run.Say("  %d connections logged in in %v", cfg.conns, r.login.Round(time.Millisecond))
	if err := read(fmt.Sprintf("%d idle connections", cfg.conns), &r.loaded); err != nil {
		return r, err
	}
	// Where the bytes are: go tool pprof -sample_index=inuse_space -top DIR/heap-MODE.pb.gz
	if prof, err := srv.Admin.Get("/debug/pprof/heap"); err == nil {
		os.WriteFile(run.Path("heap-"+mode+".pb.gz"), prof, 0o644)
	}
	harness.CloseAll(fds)
	if _, err := srv.Admin.WaitConnections(0, false, 60*time.Second); err != nil {
		return r, fmt.Errorf("after closing: %w", err)
	}
	if err := read("all closed", &r.after); err != nil {
		return r, err
	}
	code, err := srv.Stop(30 * time.Second)
	run.Say("  server: SIGTERM, exit status %d", code)
	return r, err
}

// Warm-up: warmUsers connections, warmUsers/32 per SET of the default 32
// (users map to SETs by user mod sets), each with warmPings PINGs, so that
// every slot of every 2048-slot ring carries two events. A ring's pages
// become resident only as events first pass through them (8 MiB for 32
// SETs): without this, the first connections' KLogin events would add that
// one-time cost to the per-connection RSS.
const (
	warmUsers = 64
	warmPings = 2048
	warmBatch = 64 // PINGs in flight per connection: 768 bytes, one write
)

// warmRings runs the warm-up with users first … first+warmUsers−1, which
// the measurement does not use, and closes their connections.
func warmRings(run *harness.Run, d *harness.Dialer, first uint32) error {
	fds, err := d.LoginMany(first, warmUsers, 4, nil)
	defer harness.CloseAll(fds)
	for _, fd := range fds {
		for i := 0; err == nil && i < warmPings/warmBatch; i++ {
			err = harness.PingPong(fd, warmBatch, 10*time.Second)
		}
	}
	if err == nil {
		run.Say("  rings warmed: %d PINGs from %d users", warmUsers*warmPings, warmUsers)
	}
	return err
}

// report is the table of the deltas per connection and, per mode, where
// the RSS went.
func report(n int, rs []result) harness.Doc {
	perConn := func(delta int64) string {
		b := float64(delta) / float64(n)
		return fmt.Sprintf("%.0f B (%.2f KiB)", b, b/1024)
	}
	t := &harness.Table{Right: true, Head: []string{"ingress", "conns", "RSS Δ/conn", "Go heap+stacks Δ/conn", "of which stacks", "goroutines Δ",
		"kernel socket slab Δ/conn (client + server socket)", "after close: heap+stacks, RSS vs idle"}}
	d := harness.Doc{harness.Para("Command: `connmem " + strings.Join(os.Args[1:], " ") + "`"), t}
	for _, r := range rs {
		i, l := r.idle, r.loaded
		slab := "n/a (/proc/slabinfo needs root)"
		if b, ok := harness.SocketSlab(i.System, l.System); ok {
			slab = perConn(b)
		}
		t.Add(r.mode, fmt.Sprint(n), perConn(l.RSS-i.RSS), perConn(l.HeapStacks()-i.HeapStacks()), perConn(l.StackInuse-i.StackInuse),
			fmt.Sprintf("%+d", l.Goroutines-i.Goroutines), slab, harness.MiB(r.after.HeapStacks()-i.HeapStacks())+", "+harness.MiB(r.after.RSS-i.RSS))
		dRSS, dGo, dFree := l.RSS-i.RSS, l.HeapStacks()-i.HeapStacks(), l.HeapFree-i.HeapFree
		text := fmt.Sprintf("**%s**: idle RSS %s, heap+stacks %s → with %d connections RSS %s, heap+stacks %s; TCP sockets %+d, socket buffer pages %+d, all slab (/proc/meminfo) %s per connection; logged in in %v; GET /metrics %v idle, %v loaded. "+
			"RSS Δ per connection %s = heap+stacks %s + freed heap the runtime keeps %s + the rest (runtime metadata, page granularity) %s.",
			r.mode, harness.MiB(i.RSS), harness.MiB(i.HeapStacks()), n, harness.MiB(l.RSS), harness.MiB(l.HeapStacks()), l.System.TCP["inuse"]-i.System.TCP["inuse"],
			l.System.TCP["mem"]-i.System.TCP["mem"], perConn(l.System.Slab-i.System.Slab), r.login.Round(time.Millisecond), i.Scrape.Round(100*time.Microsecond), l.Scrape.Round(100*time.Microsecond),
			perConn(dRSS), perConn(dGo), perConn(dFree), perConn(dRSS-dGo-dFree))
		var parts []string
		for _, c := range harness.TopCaches(i.System, l.System, 6) {
			parts = append(parts, c.Name+" "+harness.Per(c.Bytes, n))
		}
		if len(parts) > 0 {
			text += " Slab caches grown, per connection (its client and its server socket; the whole machine, so other processes add noise): " + strings.Join(parts, ", ") + "."
		}
		d = append(d, harness.Para(text))
		if r.mode == "epoll" {
			heap, rss := float64(dGo)/float64(n)/1024, float64(dRSS)/float64(n)/1024
			d = append(d, harness.Para(fmt.Sprintf("epoll target ≤ 0.5 KiB per connection beyond the kernel's socket: heap+stacks %.2f KiB, RSS %.2f KiB: %s",
				heap, rss, map[bool]string{true: "met", false: "NOT met"}[max(heap, rss) <= 0.5])))
		}
	}
	return d
}
