package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
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
func runCPU(ctx context.Context, cfg config, r *harness.Run) error {
	ramp, dur := cfg.ramp.Round(time.Second), cfg.duration.Round(time.Second)
	perGW := cfg.sets / 2
	fmt.Fprintf(r.Stdout, "democluster -mode cpu: per process %d users, %d SHAKE/s, %d SETs, %v after a %v ramp, the single server and the 2 gateways at once; files in %s/\n", cfg.users, cfg.qps, perGW, dur, ramp, r.Dir)

	// A single server with the SETs of one gateway.
	single, err := r.StartServer(ctx, "single.log", harness.ServerConfig{Bin: cfg.Server(),
		Args: append([]string{"-sets", strconv.Itoa(perGW)}, strings.Fields(cfg.ServerFlags)...)})
	if err != nil {
		return err
	}
	defer single.Kill()
	// A cluster of 2 gateways, twice the users and the rate.
	cl, stop, err := newCluster(ctx, &cfg, r, perGW*2, 2)
	if err != nil {
		return err
	}
	defer stop()
	if err := cl.Start(ctx, 2); err != nil {
		return err
	}
	var nats []int
	for i := range cl.NATS.Len() {
		nats = append(nats, cl.NATS.PID(i))
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
	if cpu := natsCPU; len(sides) == 3 {
		what := "the NATS server"
		if len(nats) > 1 {
			what = fmt.Sprintf("the %d NATS servers (JetStream, R3)", len(nats))
		}
		fmt.Fprintf(&txt, "  %s: %.0f ms CPU over the window: %.2f µs per SHAKE of the 2 gateways\n", what, harness.Millis(cpu), float64(cpu.Microseconds())/float64(max(1, sides[1].Shakes+sides[2].Shakes)))
	}
	report(r, "democluster -mode cpu", txt.String(), sides, "single.log, gateway*.log, n*.log, single/ and gateway/ (the load clients'), commands.txt")
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
// each server's CPU per SHAKE, and the CPU of the processes nats summed, from a
// second after the ramp to a second before the end.
func measureCPU(ctx context.Context, cfg config, r *harness.Run, loads []cpuLoad, ramp, dur time.Duration, nats []int) ([]cpuSide, time.Duration, error) {
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
			return nil, 0, err
		}
		r.Say("%s", client.CommandLine())
		clients = append(clients, client)
	}
	// The window: every client past its ramp, none at its end.
	byStart := func(a, b *harness.Client) int { return a.Start.Compare(b.Start) }
	first, last := slices.MinFunc(clients, byStart).Start, slices.MaxFunc(clients, byStart).Start
	from, to := last.Add(ramp+time.Second), first.Add(ramp+dur-time.Second)
	// A shake campaign of -shake-rate envelopes a second per process (0:
	// none, every SHAKE empty) over the load: some SHAKEs get money (and a
	// journal write), as in the demo.
	sleepUntil(ctx, first.Add(ramp/2))
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
	read := func() []reading { // the servers', then NATS's in one
		out := make([]reading, len(servers)+1)
		for i, s := range servers {
			out[i].cpu, _ = harness.CPUTime(s.PID)
			if st, _, err := s.Admin.Stats(); err == nil {
				out[i].shakes = st.Shake.Requests
			}
		}
		for _, pid := range nats {
			cpu, _ := harness.CPUTime(pid)
			out[len(servers)].cpu += cpu
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
	return out, b[len(servers)].cpu - a[len(servers)].cpu, nil
}

func sleepUntil(ctx context.Context, t time.Time) { harness.Sleep(ctx, time.Until(t)) }
