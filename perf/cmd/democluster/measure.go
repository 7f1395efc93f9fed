package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"hongbao/perf/internal/harness"
	"hongbao/proto"
)

// cpuSide is one process's CPU per SHAKE over the steady window.
type cpuSide struct {
	Name      string  `json:"name"`
	PID       int     `json:"pid"`
	Users     int     `json:"users"`
	SETs      int     `json:"sets"`
	Shakes    int64   `json:"shakes"`
	CPUms     float64 `json:"cpu_ms"`
	WindowS   float64 `json:"window_s"`
	PerShake  float64 `json:"us_per_shake"`
	ShakeRate float64 `json:"shakes_per_s"`
}

// runCPU measures server CPU per SHAKE of a single server, then of each
// gateway of a 2-gateway cluster, at the same users and SHAKE/s per process.
func runCPU(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	dir, path, err := harness.RunDir(cfg.Out, "democluster-cpu-")
	if err != nil {
		return err
	}
	ramp, dur := cfg.ramp.Round(time.Second), cfg.duration.Round(time.Second)
	perGW := cfg.sets / 2
	fmt.Fprintf(stdout, "democluster -mode cpu: per process %d users, %d SHAKE/s, %d SETs, %v after a %v ramp; files in %s/\n", cfg.users, cfg.qps, perGW, dur, ramp, dir)
	var sides []cpuSide

	// A single server with the SETs of one gateway.
	single, err := harness.Start(ctx, harness.ServerConfig{Bin: filepath.Join(cfg.Bin, "server"),
		Args: append([]string{"-sets", strconv.Itoa(perGW)}, strings.Fields(cfg.ServerFlags)...), Log: path("single.log"), Echo: stderr})
	if err != nil {
		return err
	}
	defer single.Kill()
	s, err := measureCPU(ctx, cfg, dir, "single", single, []*harness.Server{single}, cfg.users, cfg.qps, ramp, dur, stdout, stderr)
	single.Stop(30 * time.Second)
	if err != nil {
		return err
	}
	sides = append(sides, s...)

	// A cluster of 2 gateways, twice the users and the rate.
	cl := &cluster{bin: filepath.Join(cfg.Bin, "server"), sets: perGW * 2, timeout: cfg.timeout.String(),
		extra: strings.Fields(cfg.ServerFlags), dir: dir, echo: stderr}
	defer cl.cleanup()
	if err := startCluster(ctx, cl, 2); err != nil {
		return err
	}
	s, err = measureCPU(ctx, cfg, dir, "gateway", cl.gws[0].srv, []*harness.Server{cl.gws[0].srv, cl.gws[1].srv}, 2*cfg.users, 2*cfg.qps, ramp, dur, stdout, stderr)
	if err != nil {
		return err
	}
	sides = append(sides, s...)
	cl.stop(30 * time.Second)

	var txt strings.Builder
	fmt.Fprintf(&txt, "\nserver CPU per SHAKE, %s, same users, SHAKE/s and shake campaign (200/s) per process:\n", time.Now().UTC().Format("2006-01-02 15:04"))
	for _, s := range sides {
		fmt.Fprintf(&txt, "  %-10s pid %-7d %6d users %3d SETs: %9d SHAKEs in %.0f s (%.0f/s), %8.0f ms CPU: %.2f µs per SHAKE\n",
			s.Name, s.PID, s.Users, s.SETs, s.Shakes, s.WindowS, s.ShakeRate, s.CPUms, s.PerShake)
	}
	if len(sides) == 3 && sides[0].PerShake > 0 {
		gw := (sides[1].PerShake + sides[2].PerShake) / 2
		fmt.Fprintf(&txt, "  ratio gateway / single: %.2f (gateways' mean %.2f µs vs %.2f µs)\n", gw/sides[0].PerShake, gw, sides[0].PerShake)
	}
	io.WriteString(stdout, txt.String())
	os.WriteFile(path("report.txt"), []byte(txt.String()), 0o644)
	os.WriteFile(path("report.html"), []byte(htmlPage("democluster -mode cpu", txt.String())), 0o644)
	if b, err := json.MarshalIndent(sides, "", "  "); err == nil {
		os.WriteFile(path("summary.json"), b, 0o644)
	}
	return nil
}

// measureCPU runs the load client with users at qps against via, and
// returns each server's CPU per SHAKE from a second after the ramp to a
// second before the end.
func measureCPU(ctx context.Context, cfg config, dir, name string, via *harness.Server, servers []*harness.Server,
	users, qps int, ramp, dur time.Duration, stdout, stderr io.Writer) ([]cpuSide, error) {
	sub := filepath.Join(dir, name)
	os.MkdirAll(sub, 0o755)
	client, err := harness.StartClient(ctx, via, harness.ClientConfig{
		Bin: filepath.Join(cfg.Bin, "loadclient"), Dir: sub, Users: users,
		Phases: fmt.Sprintf("0@%s,%d@%s", ramp, qps, dur),
		Flags:  []string{"-duration", (ramp + dur).String(), "-procs", strconv.Itoa(procs(users)), "-connect-rate", "10000", "-quiet"},
		Source: cfg.Source, More: cfg.ClientFlags, Grace: 30 * time.Second, Stderr: stderr,
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "democluster: %s\n", client.CommandLine())
	from, to := client.Start.Add(ramp+time.Second), client.Start.Add(ramp+dur-time.Second)
	// A shake campaign of 200 envelopes a second per process, over the
	// load: some SHAKEs get money (and a journal write), as in the demo.
	sleepUntil(ctx, client.Start.Add(ramp/2))
	secs := int((ramp/2 + dur).Seconds())
	if _, err := via.Admin.StartCampaign("shake", harness.ShakeCampaign(200*len(servers), secs)); err != nil {
		fmt.Fprintf(stdout, "democluster: shake campaign: %v\n", err)
	}
	type reading struct {
		cpu    time.Duration
		shakes int64
	}
	read := func() []reading {
		out := make([]reading, len(servers))
		for i, s := range servers {
			out[i].cpu, _ = harness.CPUTime(s.PID)
			if st, _, err := s.Admin.Stats(); err == nil {
				out[i].shakes = st.Shake.Requests
			}
		}
		return out
	}
	sleepUntil(ctx, from)
	t0, a := time.Now(), read()
	sleepUntil(ctx, to)
	t1, b := time.Now(), read()
	if err := <-client.Done; err != nil {
		fmt.Fprintf(stdout, "democluster: loadclient (%s): %v\n", name, err)
	}
	var out []cpuSide
	win := t1.Sub(t0).Seconds()
	for i, s := range servers {
		n := b[i].shakes - a[i].shakes
		cpu := b[i].cpu - a[i].cpu
		side := cpuSide{Name: name, PID: s.PID, Users: users / len(servers), SETs: cfg.sets / 2, Shakes: n, CPUms: float64(cpu.Milliseconds()), WindowS: win, ShakeRate: float64(n) / win}
		if len(servers) > 1 {
			side.Name = fmt.Sprintf("gateway %d", i)
		}
		if n > 0 {
			side.PerShake = float64(cpu.Microseconds()) / float64(n)
		}
		out = append(out, side)
	}
	return out, nil
}

func sleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(t)):
	}
}

// openResult is the figures of one phase of -mode open.
type openResult struct {
	Phase  string           `json:"phase"`
	Sends  int              `json:"sends"`
	Opens  int              `json:"opens"`
	Status map[uint8]int    `json:"status"`
	Lat    map[string]int64 `json:"latency_ns"`
	Rate   float64          `json:"opens_per_s"`
	secs   float64          // the phases' load time
}

// runOpen: a cluster of 2 gateways; senders on gateway 0 SEND to openers
// on gateway 1 (every OPEN crosses), then to openers on gateway 0 (none
// does), at -open-rate OPENs a second each phase; -open-rounds alternates
// the two kinds of phase that many times.
func runOpen(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	dir, path, err := harness.RunDir(cfg.Out, "democluster-open-")
	if err != nil {
		return err
	}
	sets := cfg.sets &^ 1 // even: user u's gateway is u mod 2
	cl := &cluster{bin: filepath.Join(cfg.Bin, "server"), sets: sets, timeout: cfg.timeout.String(),
		extra: strings.Fields(cfg.ServerFlags), dir: dir, echo: stderr}
	defer cl.cleanup()
	if err := startCluster(ctx, cl, 2); err != nil {
		return err
	}
	dur := cfg.duration.Round(time.Second)
	fmt.Fprintf(stdout, "democluster -mode open: 2 gateways, %d SETs, %d OPEN/s for %v per kind in %d alternated rounds, %d recipients a SEND; files in %s/\n", sets, cfg.openRate, dur, cfg.openRounds, cfg.recips, dir)
	n := cfg.connsPerGW
	// Users 2, 4, … run on gateway 0 and 1, 3, … on gateway 1 (SET u mod
	// sets, gateway SET mod 2). Senders and local openers on gateway 0,
	// crossing openers on gateway 1.
	login := func(first uint32, addr string) ([]*rawClient, error) {
		var out []*rawClient
		for i := range n {
			c, err := dialUser(addr, first+2*uint32(i))
			if err != nil {
				closeAll(out)
				return nil, err
			}
			out = append(out, c)
		}
		return out, nil
	}
	senders, err := login(2, cl.gws[0].srv.Listen)
	if err != nil {
		return err
	}
	defer closeAll(senders)
	cross, err := login(1, cl.gws[1].srv.Listen)
	if err != nil {
		return err
	}
	defer closeAll(cross)
	local, err := login(2+2*uint32(n), cl.gws[0].srv.Listen)
	if err != nil {
		return err
	}
	defer closeAll(local)
	before, _ := readCrossings(cl.admin(1))
	phases := []struct {
		name    string
		openers []*rawClient
	}{{"crossing (opener on gateway 1, envelope on gateway 0)", cross}, {"local (opener and envelope on gateway 0)", local}}
	results := make([]openResult, len(phases))
	lats := make([][]int64, len(phases))
	for round := range cfg.openRounds {
		for i, ph := range phases {
			r, l := openPhase(ctx, ph.openers, senders, cfg.openRate, cfg.recips, dur/time.Duration(cfg.openRounds), round == cfg.openRounds-1)
			results[i].add(r)
			lats[i] = append(lats[i], l...)
		}
	}
	for i, ph := range phases {
		results[i].Phase = ph.name
		results[i].quantiles(lats[i])
	}
	after, _ := readCrossings(cl.admin(1))
	var txt strings.Builder
	fmt.Fprintf(&txt, "\nOPEN latency (write to OPEN_RESULT), %s, 2 gateways, %d OPEN/s target:\n", time.Now().UTC().Format("2006-01-02 15:04"), cfg.openRate)
	for _, r := range results {
		fmt.Fprintf(&txt, "  %-52s %6d SENDs, %7d OPENs (%.0f/s), status %v: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max %.2f ms\n",
			r.Phase, r.Sends, r.Opens, r.Rate, r.Status, ms64(r.Lat["p50"]), ms64(r.Lat["p90"]), ms64(r.Lat["p99"]), ms64(r.Lat["p99.9"]), ms64(r.Lat["max"]))
	}
	fmt.Fprintf(&txt, "  gateway 1: %.0f events sent, %.0f received over NATS, %.0f crossings timed out\n",
		after.Sent-before.Sent, after.Received-before.Received, after.TimedOut-before.TimedOut)
	io.WriteString(stdout, txt.String())
	os.WriteFile(path("report.txt"), []byte(txt.String()), 0o644)
	os.WriteFile(path("report.html"), []byte(htmlPage("democluster -mode open", txt.String())), 0o644)
	if b, err := json.MarshalIndent(results, "", "  "); err == nil {
		os.WriteFile(path("summary.json"), b, 0o644)
	}
	closeAll(senders)
	closeAll(cross)
	closeAll(local)
	return cl.stop(30 * time.Second)
}

func ms64(ns int64) float64 { return float64(ns) / 1e6 }

func closeAll(cs []*rawClient) {
	for _, c := range cs {
		c.close()
	}
}

// openPhase SENDs from senders to recips random openers at rate/recips a
// second for dur; each opener OPENs every ENVELOPE pushed to it at once.
// The latency of an OPEN runs from its write to its OPEN_RESULT. It returns
// the phase's counts and latencies. A phase of the last round waits 2 s for
// the OPENs in flight; another waits less: an answer it misses is read, with
// its own stamp, by the next phase of its kind.
func openPhase(ctx context.Context, openers, senders []*rawClient, rate, recips int, dur time.Duration, last bool) (openResult, []int64) {
	var mu sync.Mutex
	var lats []int64
	status := map[uint8]int{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, o := range openers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out []byte
			for {
				o.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				f, err := o.next()
				if err != nil {
					select {
					case <-stop:
						return
					default:
					}
					if isTimeout(err) {
						continue
					}
					return
				}
				switch f.Type {
				case proto.Envelope:
					env, _, _, _ := f.Envelope()
					out = proto.AppendOpen(out[:0], uint64(time.Now().UnixNano()), env)
					o.nc.Write(out)
				case proto.OpenResult:
					st, _, _ := f.OpenResult()
					lat := time.Now().UnixNano() - int64(f.Stamp)
					mu.Lock()
					lats = append(lats, lat)
					status[st]++
					mu.Unlock()
				}
			}
		}()
	}
	for _, s := range senders { // drain SEND_ACKs
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				s.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				if _, err := s.next(); err != nil {
					select {
					case <-stop:
						return
					default:
					}
					if !isTimeout(err) {
						return
					}
				}
			}
		}()
	}
	sendRate := float64(rate) / float64(recips)
	start := time.Now()
	sends := 0
	tick := time.NewTicker(5 * time.Millisecond)
	rcpt := make([]uint32, recips)
	var buf []byte
	for t := range tick.C {
		if t.Sub(start) >= dur || ctx.Err() != nil {
			break
		}
		for due := int(t.Sub(start).Seconds() * sendRate); sends < due; sends++ {
			s := senders[sends%len(senders)]
			perm := rand.Perm(len(openers))[:recips]
			for i, p := range perm {
				rcpt[i] = openers[p].user
			}
			buf = proto.AppendSend(buf[:0], uint64(sends+1), uint32(100*recips), rcpt)
			s.nc.Write(buf)
		}
	}
	tick.Stop()
	elapsed := time.Since(start)
	settle := 200 * time.Millisecond
	if last {
		settle = 2 * time.Second
	}
	time.Sleep(settle)
	close(stop)
	wg.Wait()
	for _, c := range append(slices.Clone(openers), senders...) {
		c.nc.SetReadDeadline(time.Time{})
	}
	return openResult{Sends: sends, Opens: len(lats), Status: status, secs: elapsed.Seconds()}, lats
}

// add counts r's SENDs, OPENs and statuses in o.
func (o *openResult) add(r openResult) {
	o.Sends += r.Sends
	o.Opens += r.Opens
	o.secs += r.secs
	if o.Status == nil {
		o.Status = map[uint8]int{}
	}
	for st, n := range r.Status {
		o.Status[st] += n
	}
}

// quantiles sets o's rate and latency quantiles from lats (sorted here).
func (o *openResult) quantiles(lats []int64) {
	slices.Sort(lats)
	q := func(p float64) int64 {
		if len(lats) == 0 {
			return 0
		}
		return lats[min(len(lats)-1, int(p*float64(len(lats))))]
	}
	if o.secs > 0 {
		o.Rate = float64(len(lats)) / o.secs
	}
	o.Lat = map[string]int64{"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p99.9": q(0.999)}
	if len(lats) > 0 {
		o.Lat["max"] = lats[len(lats)-1]
	}
}

func isTimeout(err error) bool {
	type timeout interface{ Timeout() bool }
	t, ok := err.(timeout)
	return ok && t.Timeout()
}
