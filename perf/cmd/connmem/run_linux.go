package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"hongbao/perf/internal/harness"
)

// fdMargin is what this process needs beyond one descriptor per
// connection: stdio, the server's log pipe, the admin HTTP connection, the
// Go runtime's epoll and its eventfd.
const fdMargin = 64

// result is one mode's three readings.
type result struct {
	mode                string
	conns               int
	login               time.Duration // to log in every connection
	idle, loaded, after harness.Memory
}

func run(ctx context.Context, cfg config) error {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return os.NewSyscallError("getrlimit", err)
	}
	if uint64(cfg.conns)+fdMargin > rl.Cur {
		return fmt.Errorf("-conns=%d needs %d descriptors in this process (and as many in the server); the open-files limit is %d",
			cfg.conns, cfg.conns+fdMargin, rl.Cur)
	}
	r, err := harness.NewRun(cfg.out, "connmem-", "connmem", os.Stdout, os.Stderr)
	if err != nil {
		return err
	}
	dir := r.Dir
	var results []result
	for _, mode := range cfg.modes {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := measure(ctx, cfg, r, mode)
		if err != nil {
			return fmt.Errorf("-ingress %s: %w", mode, err)
		}
		results = append(results, res)
	}
	f, err := os.Create(filepath.Join(dir, "connmem.md"))
	if err != nil {
		return err
	}
	defer f.Close()
	w := io.MultiWriter(os.Stdout, f)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Command: connmem %s\n\n", strings.Join(os.Args[1:], " "))
	writeTable(w, results)
	fmt.Fprintf(os.Stdout, "\nconnmem: table and server logs in %s/\n", dir)
	return r.WriteCommands()
}

// measure runs one server with -ingress mode through idle, loaded and
// after-close readings.
func measure(ctx context.Context, cfg config, run *harness.Run, mode string) (r result, err error) {
	r.mode, r.conns = mode, cfg.conns
	dir := run.Dir
	srv, err := run.StartServer(ctx, "server-"+mode+".log", harness.ServerConfig{
		Bin: filepath.Join(cfg.bin, "server"), Args: append([]string{"-ingress", mode}, strings.Fields(cfg.server)...),
	})
	if err != nil {
		return r, err
	}
	defer srv.Kill()
	fmt.Printf("connmem: -ingress %s: server pid %d on %s\n", mode, srv.PID, srv.Listen)
	read := func(what string) (harness.Memory, error) {
		if err := sleep(ctx, cfg.settle); err != nil {
			return harness.Memory{}, err
		}
		m, err := harness.ReadMemory(srv)
		if err != nil {
			return m, fmt.Errorf("%s: %w", what, err)
		}
		fmt.Printf("connmem:   %-26s RSS %6.1f MiB, heap %6.1f MiB + stacks %5.1f MiB, %5d goroutines, kernel slab %6.1f MiB, %5d TCP sockets; GET /metrics %v\n",
			what, mib(m.RSS), mib(m.HeapInuse), mib(m.StackInuse), m.Goroutines, mib(m.System.Slab), m.System.TCP["inuse"], m.Scrape.Round(100*time.Microsecond))
		return m, nil
	}
	d := &harness.Dialer{Server: netip.MustParseAddrPort(srv.Listen), Sources: cfg.sources, Timeout: 10 * time.Second}
	if cfg.warm {
		if err := warmRings(d, uint32(cfg.conns)+1); err != nil {
			return r, fmt.Errorf("warming the rings: %w", err)
		}
		if _, err := srv.Admin.WaitConnections(0, false, 30*time.Second); err != nil {
			return r, fmt.Errorf("after warming the rings: %w", err)
		}
	}
	if r.idle, err = read("idle"); err != nil {
		return r, err
	}
	t0 := time.Now()
	fds, err := d.LoginMany(1, cfg.conns, cfg.workers, func(n int) {
		if n%5000 == 0 {
			fmt.Printf("connmem:   %d logged in\n", n)
		}
	})
	if err != nil {
		return r, err
	}
	defer harness.CloseAll(fds)
	r.login = time.Since(t0)
	if _, err := srv.Admin.WaitConnections(int64(cfg.conns), true, 60*time.Second); err != nil {
		return r, err
	}
	fmt.Printf("connmem:   %d connections logged in in %v\n", cfg.conns, r.login.Round(time.Millisecond))
	if r.loaded, err = read(fmt.Sprintf("%d idle connections", cfg.conns)); err != nil {
		return r, err
	}
	// The heap profile at this moment says where the bytes are: go tool
	// pprof -sample_index=inuse_space -top DIR/heap-MODE.pb.gz
	if prof, err := srv.Admin.Get("/debug/pprof/heap"); err == nil {
		os.WriteFile(filepath.Join(dir, "heap-"+mode+".pb.gz"), prof, 0o644)
	}
	harness.CloseAll(fds)
	if _, err := srv.Admin.WaitConnections(0, false, 60*time.Second); err != nil {
		return r, fmt.Errorf("after closing: %w", err)
	}
	if r.after, err = read("all closed"); err != nil {
		return r, err
	}
	code, err := srv.Stop(30 * time.Second)
	fmt.Printf("connmem:   server: SIGTERM, exit status %d\n", code)
	return r, err
}

// Warm-up: warmUsers connections, warmUsers/32 per SET of the default 32
// (users map to SETs by user mod sets), each with warmPings PINGs, so that
// every slot of every 2048-slot ring carries two events. A ring's pages
// become resident only as events first pass through them (8 MiB for the
// default 32 SETs): without this, the first connections' KLogin events
// would add that one-time cost to the per-connection RSS.
const (
	warmUsers = 64
	warmPings = 2048
	warmBatch = 64 // PINGs in flight per connection: 768 bytes, one write
)

// warmRings runs the warm-up with users first … first+warmUsers−1, which
// the measurement does not use, and closes their connections.
func warmRings(d *harness.Dialer, first uint32) error {
	fds, err := d.LoginMany(first, warmUsers, 4, nil)
	if err != nil {
		return err
	}
	defer harness.CloseAll(fds)
	for _, fd := range fds {
		for range warmPings / warmBatch {
			if err := harness.PingPong(fd, warmBatch, 10*time.Second); err != nil {
				return err
			}
		}
	}
	fmt.Printf("connmem:   rings warmed: %d PINGs from %d users\n", warmUsers*warmPings, warmUsers)
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// socketSlab formats the growth of the socket slab caches per connection,
// or says why there is none.
func socketSlab(a, b harness.System, n int) string {
	d, ok := harness.SocketSlab(a, b)
	if !ok {
		return "n/a (/proc/slabinfo needs root)"
	}
	return perConn(d, n)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// perConn formats a per-connection delta in bytes and KiB.
func perConn(delta int64, n int) string {
	b := float64(delta) / float64(n)
	return fmt.Sprintf("%.0f B (%.2f KiB)", b, b/1024)
}

func writeTable(w io.Writer, rs []result) {
	t := &harness.Table{Right: true, Head: []string{"ingress", "conns", "RSS Δ/conn", "Go heap+stacks Δ/conn", "of which stacks", "goroutines Δ",
		"kernel socket slab Δ/conn (client + server socket)", "after close: heap+stacks, RSS vs idle"}}
	for _, r := range rs {
		n := r.conns
		t.Add(r.mode, fmt.Sprint(n), perConn(r.loaded.RSS-r.idle.RSS, n), perConn(r.loaded.HeapStacks()-r.idle.HeapStacks(), n),
			perConn(r.loaded.StackInuse-r.idle.StackInuse, n), fmt.Sprintf("%+d", r.loaded.Goroutines-r.idle.Goroutines),
			socketSlab(r.idle.System, r.loaded.System, n),
			fmt.Sprintf("%+.1f MiB, %+.1f MiB", mib(r.after.HeapStacks()-r.idle.HeapStacks()), mib(r.after.RSS-r.idle.RSS)))
	}
	io.WriteString(w, t.Markdown())
	fmt.Fprintln(w)
	for _, r := range rs {
		fmt.Fprintf(w, "%s: idle RSS %.1f MiB, heap+stacks %.1f MiB → with %d connections RSS %.1f MiB, heap+stacks %.1f MiB; TCP sockets %+d, socket buffer pages %+d, all slab (/proc/meminfo) %s per connection; logged in in %v; GET /metrics %v idle, %v loaded\n",
			r.mode, mib(r.idle.RSS), mib(r.idle.HeapStacks()), r.conns, mib(r.loaded.RSS), mib(r.loaded.HeapStacks()),
			r.loaded.System.TCP["inuse"]-r.idle.System.TCP["inuse"], r.loaded.System.TCP["mem"]-r.idle.System.TCP["mem"],
			perConn(r.loaded.System.Slab-r.idle.System.Slab, r.conns), r.login.Round(time.Millisecond),
			r.idle.Scrape.Round(100*time.Microsecond), r.loaded.Scrape.Round(100*time.Microsecond))
		dRSS, dGo, dFree := r.loaded.RSS-r.idle.RSS, r.loaded.HeapStacks()-r.idle.HeapStacks(), r.loaded.HeapFree-r.idle.HeapFree
		fmt.Fprintf(w, "  RSS Δ per connection %s = heap+stacks %s + freed heap the runtime keeps %s + the rest (runtime metadata, page granularity) %s\n",
			perConn(dRSS, r.conns), perConn(dGo, r.conns), perConn(dFree, r.conns), perConn(dRSS-dGo-dFree, r.conns))
		if top := harness.TopCaches(r.idle.System, r.loaded.System, 6); len(top) > 0 {
			var parts []string
			for _, c := range top {
				parts = append(parts, fmt.Sprintf("%s %.0f B", c.Name, float64(c.Bytes)/float64(r.conns)))
			}
			fmt.Fprintf(w, "  slab caches grown, per connection (its client and its server socket; the whole machine, so other processes add noise): %s\n", strings.Join(parts, ", "))
		}
	}
	for _, r := range rs {
		if r.mode != "epoll" {
			continue
		}
		per := float64(r.loaded.HeapStacks()-r.idle.HeapStacks()) / float64(r.conns) / 1024
		rss := float64(r.loaded.RSS-r.idle.RSS) / float64(r.conns) / 1024
		verdict := "met"
		if max(per, rss) > 0.5 {
			verdict = "NOT met"
		}
		fmt.Fprintf(w, "\nepoll target ≤ 0.5 KiB per connection beyond the kernel's socket: heap+stacks %.2f KiB, RSS %.2f KiB: %s\n", per, rss, verdict)
	}
}
