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
	// natsCPU: the NATS server processes' CPU over the same window (a
	// cluster whose journal is on them).
	natsCPU []time.Duration
}

// runCPU measures server CPU per SHAKE of a single server, then of each
// gateway of a 2-gateway cluster, at the same users and SHAKE/s per process.
func runCPU(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	r, err := harness.NewRun(cfg.Out, "democluster-cpu-", "democluster", stdout, stderr)
	if err != nil {
		return err
	}
	dir := r.Dir
	ramp, dur := cfg.ramp.Round(time.Second), cfg.duration.Round(time.Second)
	perGW := cfg.sets / 2
	fmt.Fprintf(stdout, "democluster -mode cpu: per process %d users, %d SHAKE/s, %d SETs, %v after a %v ramp; files in %s/\n", cfg.users, cfg.qps, perGW, dur, ramp, dir)
	var sides []cpuSide

	// A single server with the SETs of one gateway.
	single, err := r.StartServer(ctx, "single.log", harness.ServerConfig{Bin: cfg.Server(),
		Args: append([]string{"-sets", strconv.Itoa(perGW)}, strings.Fields(cfg.ServerFlags)...)})
	if err != nil {
		return err
	}
	defer single.Kill()
	s, err := measureCPU(ctx, cfg, r, "single", single, []*harness.Server{single}, cfg.users, cfg.qps, ramp, dur)
	single.Stop(30 * time.Second)
	if err != nil {
		return err
	}
	sides = append(sides, s...)

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
	s, err = measureCPU(ctx, cfg, r, "gateway", cl.Gateways[0].Srv, []*harness.Server{cl.Gateways[0].Srv, cl.Gateways[1].Srv}, 2*cfg.users, 2*cfg.qps, ramp, dur, nats...)
	if err != nil {
		return err
	}
	sides = append(sides, s...)
	natsLine := ""
	if js := cl.NATSServers; js != nil && len(s) > 0 {
		var cpu time.Duration
		for _, c := range s[0].natsCPU {
			cpu += c
		}
		shakes := s[0].Shakes + s[1].Shakes
		natsLine = fmt.Sprintf("  the 3 NATS servers (JetStream, R3): %.0f ms CPU over the window: %.2f µs per SHAKE of the 2 gateways\n", float64(cpu.Microseconds())/1000, float64(cpu.Microseconds())/float64(max(1, shakes)))
	}
	cl.Stop(30 * time.Second)

	var txt strings.Builder
	fmt.Fprintf(&txt, "\nserver CPU per SHAKE, %s, same users, SHAKE/s and shake campaign (%d/s) per process; the gateways' journal: %s\n", time.Now().UTC().Format("2006-01-02 15:04"), cfg.camps.Shake, cfg.journal)
	for _, s := range sides {
		fmt.Fprintf(&txt, "  %-10s pid %-7d %6d users %3d SETs: %9d SHAKEs in %.0f s (%.0f/s), %8.0f ms CPU: %.2f µs per SHAKE\n",
			s.Name, s.PID, s.Users, s.SETs, s.Shakes, s.WindowS, s.ShakeRate, s.CPUms, s.PerShake)
	}
	if len(sides) == 3 && sides[0].PerShake > 0 {
		gw := (sides[1].PerShake + sides[2].PerShake) / 2
		fmt.Fprintf(&txt, "  ratio gateway / single: %.2f (gateways' mean %.2f µs vs %.2f µs)\n", gw/sides[0].PerShake, gw, sides[0].PerShake)
	}
	txt.WriteString(natsLine)
	writeText(r, "democluster -mode cpu", txt.String(), sides)
	return r.WriteCommands()
}

// measureCPU runs the load client with users at qps against via, and
// returns each server's CPU per SHAKE from a second after the ramp to a
// second before the end.
func measureCPU(ctx context.Context, cfg config, r *harness.Run, name string, via *harness.Server, servers []*harness.Server,
	users, qps int, ramp, dur time.Duration, nats ...int) ([]cpuSide, error) {
	sub := r.Path(name)
	os.MkdirAll(sub, 0o755)
	client, err := r.StartClient(ctx, via, harness.ClientConfig{
		Bin: cfg.Client(), Dir: sub, Users: harness.Users(users), Aligned: true,
		Phases: fmt.Sprintf("0@%s,%d@%s", ramp, qps, dur),
		Flags:  []string{"-duration", (ramp + dur).String(), "-procs", strconv.Itoa(procs(users)), "-connect-rate", "10000", "-quiet"},
		Source: cfg.Source, More: cfg.ClientFlags, Grace: 30 * time.Second, Stderr: r.Stderr,
	})
	if err != nil {
		return nil, err
	}
	r.Say("%s", client.CommandLine())
	from, to := client.Start.Add(ramp+time.Second), client.Start.Add(ramp+dur-time.Second)
	// A shake campaign of -shake-rate envelopes a second per process (0:
	// none, every SHAKE empty), over the
	// load: some SHAKEs get money (and a journal write), as in the demo.
	sleepUntil(ctx, client.Start.Add(ramp/2))
	secs := int((ramp/2 + dur).Seconds())
	if cfg.camps.Shake > 0 {
		if _, err := via.Admin.StartCampaign("shake", harness.ShakeCampaign(cfg.camps.Shake*len(servers), secs)); err != nil {
			r.Say("shake campaign: %v", err)
		}
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
	if err := client.Wait(); err != nil {
		r.Say("loadclient (%s): %v", name, err)
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
	for i := range nats {
		out[0].natsCPU = append(out[0].natsCPU, b[len(servers)+i].cpu-a[len(servers)+i].cpu)
	}
	return out, nil
}

func sleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(t)):
	}
}
