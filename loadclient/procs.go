package loadclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A -procs parent re-executes its own binary once per child with hidden flags: -child, the
// child's users (-child-users, a contiguous share of -users; -users stays the run's, so
// recipients and the SEND and CHAT rates are computed over the whole run), the run's start
// (-start-ns, so every child has the same plan) and its share of -source and -connect-rate.
//
// The two talk in lines. The child writes JSON to its stdout: a "tick" a second (its
// cumulative counters and the SHAKE latencies since the last tick), "drained" once its
// answers are in after the run, and "result" (the counters and every histogram) when it
// has closed its connections. The parent writes commands to the child's stdin: "qps N AT"
// (Schedule.SetRate(N, AT), AT chosen once by the parent so that all children switch at the
// same second) and "end" (stop sending now); closing stdin tells a drained child to close
// its connections and report. A child whose stdin closes before the end (its parent died)
// ends the run too.

// childTickLag is how long after each whole second the parent reads its children's ticks,
// which they send tickLag after it.
const childTickLag = 200 * time.Millisecond

// childSecretEnv carries -auth-secret to the children, so that it is not in their argv.
const childSecretEnv = "HONGBAO_LOADCLIENT_AUTH_SECRET"

// childMsg is one line from a child.
type childMsg struct {
	K       string           `json:"k"` // tick, drained, result
	C       counters         `json:"c"`
	Live    *LatencyBuckets  `json:"live,omitempty"`
	Drained bool             `json:"drained,omitempty"` // nothing in flight (else the grace ran out)
	Hists   []LatencyBuckets `json:"h,omitempty"`
	Mem     *MemoryReport    `json:"mem,omitempty"`
	Err     string           `json:"err,omitempty"`
}

// runChild runs one child's share of the load, talking to its parent on in and out.
func runChild(ctx context.Context, cfg *Config, in io.Reader, out io.Writer) error {
	plan, err := newRunPlan(cfg, startOf(cfg))
	if err != nil {
		return err
	}
	eng, err := newEngine(plan)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	rt := newRates(plan.changes)
	rep := newReporter(cfg, plan.startNs, rt, nil)
	rep.lagNs = int64(tickLag)
	rep.onTick = func(c *counters, live *LatencyHistogram) {
		w := wireOf(live)
		enc.Encode(childMsg{K: "tick", C: *c, Live: &w})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 3 && f[0] == "qps":
				q, err1 := strconv.ParseUint(f[1], 10, 32)
				at, err2 := strconv.ParseInt(f[2], 10, 64)
				if err1 == nil && err2 == nil && q <= MaxQPS {
					rt.set(uint32(q), at)
					eng.setRate(uint32(q), at)
				}
			case len(f) == 1 && f[0] == "end":
				eng.endNow()
			}
		}
	}()
	go func() {
		select {
		case <-eof:
			cancel() // the parent is gone or done: end the run
		case <-ctx.Done():
		}
	}()
	drive(ctx, eng, rep, plan.endNs)
	cur, drained := drainLocal(eng, time.Now().Add(cfg.Grace).UnixNano())
	enc.Encode(childMsg{K: "drained", C: cur, Drained: drained})
	select { // the parent reconciles while the connections are still up
	case <-eof:
	case <-time.After(cfg.Grace + 30*time.Second):
	}
	mem := memoryOf(cur.Users)
	res := eng.stop()
	msg := childMsg{K: "result", C: res.counters, Mem: mem}
	for _, h := range res.hists {
		msg.Hists = append(msg.Hists, wireOf(h))
	}
	if res.err != nil {
		msg.Err = res.err.Error()
	}
	return enc.Encode(msg)
}

// child is the parent's view of one child process.
type child struct {
	id    int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when its stdout ended and it was waited for

	// Guarded by childSet.mu.
	last    counters
	drained *childMsg
	result  *childMsg
	err     error
}

// childSet is the children of a -procs parent, as one source.
type childSet struct {
	mu       sync.Mutex
	children []*child
	live     *LatencyHistogram // SHAKE latencies of the ticks since the last poll
}

func (cs *childSet) send(line string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.children {
		io.WriteString(c.stdin, line)
	}
}

func (cs *childSet) setRate(qps uint32, atNs int64) { cs.send(fmt.Sprintf("qps %d %d\n", qps, atNs)) }

func (cs *childSet) endNow() { cs.send("end\n") }

func (cs *childSet) poll(total *counters, live *LatencyHistogram) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.children {
		total.add(&c.last)
	}
	live.Merge(cs.live)
	cs.live.Reset()
}

// read takes c's lines until its stdout ends, then waits for it.
func (cs *childSet) read(c *child, out io.Reader) {
	defer close(c.done)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 64<<20) // a result line holds six histograms
	for sc.Scan() {
		var m childMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			cs.fail(c, fmt.Errorf("child %d: bad line %.100q: %w", c.id, sc.Text(), err))
			continue
		}
		cs.mu.Lock()
		c.last = m.C
		switch m.K {
		case "tick":
			if m.Live != nil {
				if err := m.Live.mergeInto(cs.live); err != nil {
					c.err = errors.Join(c.err, fmt.Errorf("child %d: %w", c.id, err))
				}
			}
		case "drained":
			c.drained = &m
		case "result":
			c.result = &m
		}
		cs.mu.Unlock()
	}
	if err := c.cmd.Wait(); err != nil {
		cs.fail(c, fmt.Errorf("child %d (%s): %w", c.id, c.cmd.Args[len(c.cmd.Args)-1], err))
	}
}

func (cs *childSet) fail(c *child, err error) {
	cs.mu.Lock()
	c.err = errors.Join(c.err, err)
	cs.mu.Unlock()
}

// waitFor waits until every child has done what ok says or has exited, or until deadline.
func (cs *childSet) waitFor(ok func(*child) bool, deadline time.Time) {
	for time.Now().Before(deadline) {
		all := true
		cs.mu.Lock()
		for _, c := range cs.children {
			select {
			case <-c.done:
			default:
				all = all && ok(c)
			}
		}
		cs.mu.Unlock()
		if all {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// childArgs returns the command line of child i of n, holding users part.
func childArgs(cfg *Config, i, n int, part Range, startNs int64) []string {
	share := float64(part.Len()) / float64(cfg.Users.Len())
	args := []string{
		"-child",
		"-server", strings.Join(cfg.Servers, ","),
		"-users", cfg.Users.String(),
		"-total-users", strconv.FormatUint(uint64(cfg.TotalUsers), 10),
		"-qps", strconv.FormatUint(uint64(cfg.QPS), 10),
		"-duration", cfg.Duration.String(),
		"-loops", strconv.Itoa(max(1, cfg.Loops/n)),
		"-connect-rate", strconv.Itoa(max(1, int(math.Ceil(float64(cfg.ConnectRate)*share)))),
		"-connect-timeout", cfg.ConnectTimeout.String(),
		"-timeout", cfg.Timeout.String(),
		"-send-rate", strconv.FormatFloat(cfg.SendRate, 'g', -1, 64),
		"-send-recipients", strconv.Itoa(cfg.SendRecipients),
		"-send-total", strconv.FormatUint(uint64(cfg.SendTotal), 10),
		"-chat-rate", strconv.FormatFloat(cfg.ChatRate, 'g', -1, 64),
		"-chat-size", strconv.Itoa(cfg.ChatSize),
		"-churn", strconv.FormatFloat(cfg.ChurnRate, 'g', -1, 64),
		"-request-ids=" + strconv.FormatBool(cfg.RequestIDs),
		"-grace", cfg.Grace.String(),
		"-reconcile", "off",
		"-sched", cfg.Sched,
		"-start-ns", strconv.FormatInt(startNs, 10),
	}
	if cfg.Phases != "" {
		args = append(args, "-phases", cfg.Phases)
	}
	// Sources: a disjoint share when there are enough, else all of them (the kernel picks
	// ports per 4-tuple, so processes can share an address).
	var src []string
	for j, a := range cfg.Sources {
		if len(cfg.Sources) < n || j%n == i {
			src = append(src, a.String())
		}
	}
	if len(src) > 0 {
		args = append(args, "-source", strings.Join(src, ","))
	}
	return append(args, "-child-users", part.String())
}

// runParent runs the load in cfg.Procs children and aggregates their figures.
func runParent(ctx context.Context, cfg *Config, out io.Writer) (*Report, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("-procs: cannot find this binary to re-execute: %w", err)
	}
	var base *baseline
	if cfg.Reconcile != ReconcileOff {
		if base, err = readBaseline(cfg); err != nil {
			return nil, err
		}
	}
	// Far enough ahead that every child has started before the first send.
	startNs := (time.Now().Add(500*time.Millisecond).UnixNano()/nsPerSec + 1) * nsPerSec
	plan, err := newRunPlan(cfg, startNs)
	if err != nil {
		return nil, err
	}
	cs := &childSet{live: new(LatencyHistogram)}
	stopAll := func() {
		for _, c := range cs.children {
			c.stdin.Close()
			c.cmd.Process.Kill()
			<-c.done
		}
	}
	for i, part := range splitRange(cfg.Users, cfg.Procs) {
		cmd := exec.Command(exe, childArgs(cfg, i, cfg.Procs, part, startNs)...)
		cmd.Stderr = os.Stderr
		cmd.Env = os.Environ()
		if cfg.AuthSecret != "" {
			cmd.Env = append(cmd.Env, childSecretEnv+"="+cfg.AuthSecret)
		}
		stdin, err1 := cmd.StdinPipe()
		stdout, err2 := cmd.StdoutPipe()
		if err := errors.Join(err1, err2); err != nil {
			stopAll()
			return nil, fmt.Errorf("-procs: %w", err)
		}
		if err := cmd.Start(); err != nil {
			stopAll()
			return nil, fmt.Errorf("-procs: cannot start child %d: %w", i, err)
		}
		c := &child{id: i, cmd: cmd, stdin: stdin, done: make(chan struct{})}
		cs.children = append(cs.children, c)
		go cs.read(c, stdout)
	}
	rt := newRates(plan.changes)
	rep := newReporter(cfg, startNs, rt, out)
	rep.lagNs = int64(childTickLag)
	if cfg.Control != "" {
		stop, err := serveControl(cfg.Control, cs, rt, rep)
		if err != nil {
			stopAll()
			return nil, err
		}
		defer stop()
	}
	drive(ctx, cs, rep, plan.endNs)
	// Each child bounds its own drain by the grace; the margin covers their reporting.
	cs.waitFor(func(c *child) bool { return c.drained != nil }, time.Now().Add(cfg.Grace+5*time.Second))

	var cur counters
	drained := true
	cs.mu.Lock()
	for _, c := range cs.children {
		if c.drained == nil {
			drained = false
			cur.add(&c.last)
			continue
		}
		drained = drained && c.drained.Drained
		cur.add(&c.drained.C)
	}
	cs.mu.Unlock()
	var rec *ReconcileReport
	if cfg.Reconcile != ReconcileOff {
		rec = reconcile(cfg, base, &cur, drained)
	}

	for _, c := range cs.children {
		c.stdin.Close() // drained: close your connections and report
	}
	cs.waitFor(func(*child) bool { return false }, time.Now().Add(30*time.Second))
	res := newLoadResult()
	mem := &MemoryReport{}
	for _, c := range cs.children {
		select {
		case <-c.done:
		default:
			c.cmd.Process.Kill()
			<-c.done
			cs.fail(c, fmt.Errorf("child %d: no result 30s after the run; killed", c.id))
		}
		// The reader has returned: c's fields are no longer shared.
		if c.err != nil {
			res.err = errors.Join(res.err, c.err)
		}
		if c.result == nil {
			res.err = errors.Join(res.err, fmt.Errorf("child %d: exited without a result", c.id))
			res.counters.add(&c.last)
			continue
		}
		res.counters.add(&c.result.C)
		for k := range min(len(c.result.Hists), nHist) {
			if err := c.result.Hists[k].mergeInto(res.hists[k]); err != nil {
				res.err = errors.Join(res.err, fmt.Errorf("child %d: %w", c.id, err))
			}
		}
		if c.result.Err != "" {
			res.err = errors.Join(res.err, fmt.Errorf("child %d: %s", c.id, c.result.Err))
		}
		if m := c.result.Mem; m != nil {
			mem.HeapInuse += m.HeapInuse
			mem.StackInuse += m.StackInuse
			mem.Users += m.Users
		}
	}
	if mem.Users > 0 {
		mem.PerUser = float64(mem.HeapInuse+mem.StackInuse) / float64(mem.Users)
	}
	return finish(cfg, rep, res, rec, mem, out)
}
