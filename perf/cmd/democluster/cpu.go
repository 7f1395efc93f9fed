package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"hongbao/perf/internal/harness"
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

// runCPU measures server CPU per SHAKE of a single server and of each
// gateway of a 2-gateway cluster side by side, in one window: every process
// with the same users and SHAKE/s, so the machine's load and noise fall on
// all three alike.
func runCPU(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	r, err := harness.NewRun(cfg.Out, "democluster-cpu-", "democluster", stdout, stderr)
	if err != nil {
		return err
	}
	dir := r.Dir
	ramp, dur := cfg.ramp.Round(time.Second), cfg.duration.Round(time.Second)
	perGW := cfg.sets / 2
	fmt.Fprintf(stdout, "democluster -mode cpu: per process %d users, %d SHAKE/s, %d SETs, %v after a %v ramp, the single server and the 2 gateways at once; files in %s/\n", cfg.users, cfg.qps, perGW, dur, ramp, dir)

	// A single server with the SETs of one gateway.
	single, err := r.StartServer(ctx, "single.log", harness.ServerConfig{Bin: cfg.Server(),
		Args: append([]string{"-sets", strconv.Itoa(perGW)}, strings.Fields(cfg.ServerFlags)...)})
	if err != nil {
		return err
	}
	defer single.Kill()
	// A cluster of 2 gateways, twice the users and the rate.
	cl, stop, err := newCluster(ctx, &cfg, dir, perGW*2, 2, stderr)
	if err != nil {
		return err
	}
	defer stop()
	if err := cl.Start(ctx, 2); err != nil {
		return err
	}
	var nats []int
	if js := cl.NATSServers; js != nil {
		for i := range js.Len() {
			nats = append(nats, js.PID(i))
		}
	}
	gws := []*harness.Server{cl.Gateways[0].Srv, cl.Gateways[1].Srv}
	sides, natsCPU, err := measureCPU(ctx, cfg, r, []cpuLoad{
		{name: "single", via: single, servers: []*harness.Server{single}, users: cfg.users, qps: cfg.qps},
		{name: "gateway", via: gws[0], servers: gws, users: 2 * cfg.users, qps: 2 * cfg.qps},
	}, ramp, dur, nats)
	single.Stop(30 * time.Second)
	cl.Stop(30 * time.Second)
	if err != nil {
		return err
	}

	var txt strings.Builder
	fmt.Fprintf(&txt, "\nserver CPU per SHAKE, %s, same users, SHAKE/s and shake campaign (%d/s) per process, all three at once; the gateways' journal: %s\n", time.Now().UTC().Format("2006-01-02 15:04"), cfg.camps.Shake, cfg.journal)
	for _, s := range sides {
		fmt.Fprintf(&txt, "  %-10s pid %-7d %6d users %3d SETs: %9d SHAKEs in %.0f s (%.0f/s), %8.0f ms CPU: %.2f µs per SHAKE\n",
			s.Name, s.PID, s.Users, s.SETs, s.Shakes, s.WindowS, s.ShakeRate, s.CPUms, s.PerShake)
	}
	if len(sides) == 3 && sides[0].PerShake > 0 {
		gw := (sides[1].PerShake + sides[2].PerShake) / 2
		fmt.Fprintf(&txt, "  ratio gateway / single: %.2f (gateways' mean %.2f µs vs %.2f µs)\n", gw/sides[0].PerShake, gw, sides[0].PerShake)
	}
	if len(nats) > 0 && len(sides) == 3 {
		var cpu time.Duration
		for _, c := range natsCPU {
			cpu += c
		}
		shakes := sides[1].Shakes + sides[2].Shakes
		fmt.Fprintf(&txt, "  the 3 NATS servers (JetStream, R3): %.0f ms CPU over the window: %.2f µs per SHAKE of the 2 gateways\n", float64(cpu.Microseconds())/1000, float64(cpu.Microseconds())/float64(max(1, shakes)))
	}
	writeText(r, "democluster -mode cpu", txt.String(), sides)
	return r.WriteCommands()
}

// cpuLoad is one load client's share of a -mode cpu run: users at qps
// against via, whose servers are measured.
type cpuLoad struct {
	name       string
	via        *harness.Server
	servers    []*harness.Server
	users, qps int
}

// measureCPU runs a load client for each load, all at once, and returns
// each server's CPU per SHAKE, and the CPU of the processes nats, from a
// second after the ramp to a second before the end.
func measureCPU(ctx context.Context, cfg config, r *harness.Run, loads []cpuLoad, ramp, dur time.Duration, nats []int) ([]cpuSide, []time.Duration, error) {
	var clients []*harness.Client
	defer func() {
		for _, c := range clients {
			if err := c.Wait(); err != nil {
				r.Say("loadclient: %v", err)
			}
		}
	}()
	for _, l := range loads {
		// As many client processes as servers, each with one server's users
		// and rate: a loopback write's cost includes waking its reader, so
		// every server must answer readers equally busy.
		n := max(procs(l.users), len(l.servers))
		sub := r.Path(l.name)
		os.MkdirAll(sub, 0o755)
		client, err := r.StartClient(ctx, l.via, harness.ClientConfig{
			Bin: cfg.Client(), Dir: sub, Users: harness.Users(l.users), Aligned: true,
			Phases: fmt.Sprintf("0@%s,%d@%s", ramp, l.qps, dur),
			Flags:  []string{"-duration", (ramp + dur).String(), "-procs", strconv.Itoa(n), "-connect-rate", "10000", "-quiet"},
			Source: cfg.Source, More: cfg.ClientFlags, Grace: 30 * time.Second, Stderr: r.Stderr,
		})
		if err != nil {
			return nil, nil, err
		}
		r.Say("%s", client.CommandLine())
		clients = append(clients, client)
	}
	// The window: every client past its ramp, none at its end.
	first, last := clients[0].Start, clients[0].Start
	for _, c := range clients[1:] {
		first, last = minTime(first, c.Start), maxTime(last, c.Start)
	}
	from, to := last.Add(ramp+time.Second), first.Add(ramp+dur-time.Second)
	begin := first
	// A shake campaign of -shake-rate envelopes a second per process (0:
	// none, every SHAKE empty) over the load: some SHAKEs get money (and a
	// journal write), as in the demo.
	sleepUntil(ctx, begin.Add(ramp/2))
	secs := int((ramp/2 + dur).Seconds())
	if cfg.camps.Shake > 0 {
		for _, l := range loads {
			if _, err := l.via.Admin.StartCampaign("shake", harness.ShakeCampaign(cfg.camps.Shake*len(l.servers), secs)); err != nil {
				r.Say("shake campaign (%s): %v", l.name, err)
			}
		}
	}
	var servers []*harness.Server
	for _, l := range loads {
		servers = append(servers, l.servers...)
	}
	type reading struct {
		cpu    time.Duration
		shakes int64
	}
	read := func() []reading {
		out := make([]reading, len(servers)+len(nats))
		for i, s := range servers {
			out[i].cpu, _ = harness.CPUTime(s.PID)
			if st, _, err := s.Admin.Stats(); err == nil {
				out[i].shakes = st.Shake.Requests
			}
		}
		for i, pid := range nats {
			out[len(servers)+i].cpu, _ = harness.CPUTime(pid)
		}
		return out
	}
	sleepUntil(ctx, from)
	t0, a := time.Now(), read()
	sleepUntil(ctx, to)
	t1, b := time.Now(), read()
	var out []cpuSide
	win := t1.Sub(t0).Seconds()
	i := 0
	for _, l := range loads {
		for j, s := range l.servers {
			n := b[i].shakes - a[i].shakes
			cpu := b[i].cpu - a[i].cpu
			side := cpuSide{Name: l.name, PID: s.PID, Users: l.users / len(l.servers), SETs: cfg.sets / 2, Shakes: n, CPUms: float64(cpu.Milliseconds()), WindowS: win, ShakeRate: float64(n) / win}
			if len(l.servers) > 1 {
				side.Name = fmt.Sprintf("%s %d", l.name, j)
			}
			if n > 0 {
				side.PerShake = float64(cpu.Microseconds()) / float64(n)
			}
			out = append(out, side)
			i++
		}
	}
	var natsCPU []time.Duration
	for k := range nats {
		natsCPU = append(natsCPU, b[len(servers)+k].cpu-a[len(servers)+k].cpu)
	}
	return out, natsCPU, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func sleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(t)):
	}
}
