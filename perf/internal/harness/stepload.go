package harness

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"
)

// StepLoad is a run of gateways on JetStream under load, with faults or
// steps one -slot apart: what demofailover and demorolling share.
type StepLoad struct {
	Sets, Replicas int
	Users, QPS     int
	Lease          time.Duration // the gateways' -lease
	Ramp, Lead     time.Duration // users in; load before the first step
	Slot           time.Duration // from one step's start to the next's
	SendRate       float64
	Camps          Campaigns
}

// Add defines the flags on fs; step names what comes -slot apart (a
// fault, a step), slot is -slot's default.
func (c *StepLoad) Add(fs *flag.FlagSet, step string, slot time.Duration) {
	fs.IntVar(&c.Sets, "sets", 12, "-sets of every gateway (`N`)")
	fs.IntVar(&c.Replicas, "replicas", 3, "the gateways' -replicas: JetStream's copies of the journal, snapshots and ownership records")
	fs.IntVar(&c.Users, "users", 3000, "users 1..`N` of the load client, each its own connection")
	fs.IntVar(&c.QPS, "qps", 3000, "the load client's SHAKEs a second (`rate`)")
	DurationVar(fs, &c.Lease, "lease", 1500*time.Millisecond, "the gateways' -lease: a gateway not heard from for this long loses its SETs, `d`")
	DurationVar(fs, &c.Ramp, "ramp", 5*time.Second, "time for the users to connect before the load, `d`")
	DurationVar(fs, &c.Lead, "lead", 10*time.Second, "load before the first "+step+", `d`")
	DurationVar(fs, &c.Slot, "slot", slot, "from a "+step+"'s start to the next one's, `d`")
	fs.Float64Var(&c.SendRate, "send-rate", 100, "the load client's SENDs a second (`rate`), each to -recipients random users")
	c.Camps.Add(fs, 0, "send-campaign-rate", 50)
}

// Validate adds to bad what is wrong with the flags, for a run of up to
// gateways gateways (the most replicas) over at least minSets SETs, whose
// lead is at least minLead.
func (c *StepLoad) Validate(bad *Problems, gateways, minSets int, minLead time.Duration) {
	bad.If(c.Sets < minSets || c.Sets > 4096, "-sets=%d: want %d..4096", c.Sets, minSets)
	bad.If(c.Replicas < 1 || c.Replicas > gateways, "-replicas=%d: want 1..%d", c.Replicas, gateways)
	bad.If(c.QPS < 0, "-qps=%d: want 0 or more", c.QPS)
	bad.If(c.Lease < 500*time.Millisecond, "-lease=%v: want at least 500ms", c.Lease)
	bad.If(c.Ramp < time.Second || c.Lead < minLead, "-ramp=%v, -lead=%v: want at least 1s and %v", c.Ramp, c.Lead, minLead)
	bad.If(c.SendRate < 0, "-send-rate=%v: want 0 or more", c.SendRate)
	bad.If(c.Camps.Shake < 0 || c.Camps.Send < 1, "-shake-rate=%d, -send-campaign-rate=%d: want 0 (sized to the load) or more, and at least 1", c.Camps.Shake, c.Camps.Send)
}

// ShakeFill is the shake campaign of a run whose load lasts load: its rate
// (-shake-rate, or, for 0, two envelopes for each SHAKE of the run) and
// its seconds, within the lead.
func (c *StepLoad) ShakeFill(load time.Duration) (rate, secs int) {
	secs = max(1, int(c.Lead.Seconds())-2)
	if rate = c.Camps.Shake; rate == 0 {
		rate = max(100, 2*c.QPS*int(load.Seconds())/secs)
	}
	return rate, secs
}

// StartStepClient starts the load client on every gateway of cl: the users
// in over the ramp, then QPS SHAKE/s and SendRate SENDs a second for load,
// with the flags more (its -reconcile); it says its command line and waits
// for the users to log in.
func (r *Run) StartStepClient(ctx context.Context, cl *Cluster, c StepLoad, rf RunFlags, load time.Duration, more ...string) (*Client, error) {
	total := c.Ramp + load
	client, err := r.StartClient(ctx, nil, ClientConfig{
		Bin: rf.Client(), Servers: cl.Addrs(), Admins: cl.AdminURLs(), Users: Users(c.Users), Aligned: true,
		Phases: fmt.Sprintf("0@%s,%d@%s", c.Ramp, c.QPS, load),
		Flags: append([]string{"-duration", total.String(), "-send-rate", fmt.Sprint(c.SendRate), "-send-recipients", strconv.Itoa(c.Camps.Recipients),
			"-connect-rate", "10000", "-timeout", "20s", "-grace", "20s", "-quiet"}, more...),
		Source: rf.Source, More: rf.ClientFlags, Grace: 30 * time.Second, Stderr: r.Stderr,
	})
	if err != nil {
		return nil, err
	}
	r.Say("%s", client.CommandLine())
	r.Steps.SetStart(client.Start)
	if n, err := WaitLogins(ctx, cl.Logins, int64(c.Users), time.Now().Add(c.Ramp+5*time.Second), client); err != nil {
		r.Say("%v; starting the campaigns anyway", err)
	} else {
		r.Say("%d users logged in %.1fs after the load client's launch", n, time.Since(client.Launched).Seconds())
	}
	return client, nil
}

// CheckMoney reads the cluster's money and ledger once settled (Settled)
// and checks them: the ledger's invariants, and told == counted since
// baseline, exactly: the clients send what a fault left unanswered again
// with its request id, so every fen counted was told. What fails goes to fail.
func (c *Cluster) CheckMoney(baseline, told int64, fail func(string, ...any)) (final int64, cs ClusterStats, checks []LedgerCheck) {
	final, cs, checks, err := c.Settled()
	if err != nil {
		fail("/cluster/stats at the end: %v", err)
	}
	for _, b := range FailedChecks(checks) {
		fail("cluster: %s", b)
	}
	if told != final-baseline {
		fail("money told %d, counted %d since the baseline: %d fen counted and never told", told, final-baseline, final-baseline-told)
	}
	return final, cs, checks
}

// DurationVar defines a duration flag that takes a Go duration or whole
// seconds (ParseDuration).
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Func(name, usage+" (a Go duration or whole seconds; default "+def.String()+")", func(s string) (err error) {
		*p, err = ParseDuration(s)
		return err
	})
}

// Verdict is a check's word in a report.
func Verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAILED"
}

// Sleep waits d or until ctx is done.
func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
