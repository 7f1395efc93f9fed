package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
)

// serverProc is one server process.
type serverProc struct {
	part part
	srv  *harness.Server
	args []string
	log  string

	idle, ramped, end procMem
	stats             harness.Stats // after the load clients left
	camps             []harness.Campaign
	checks            []check
	exitCode          int
	exitErr           error
}

// clientProc is one load-client process.
type clientProc struct {
	part     part
	cmd      *exec.Cmd
	args     []string
	control  string // host:port of its -control API
	report   string // its -report file
	timeline string
	log      string
	logf     *os.File

	done chan struct{} // closed once it has exited
	err  error         // its exit, set before done is closed

	ramped, end procMem
	rep         *loadclient.Report
}

// procMem is a process's memory at one moment. The Go figures are the
// server's (from /metrics after a GC); a load client has RSS only.
type procMem struct {
	RSS        int64         `json:"rss"`
	HeapInuse  int64         `json:"heap_inuse,omitempty"`
	StackInuse int64         `json:"stack_inuse,omitempty"`
	HeapFree   int64         `json:"heap_free,omitempty"` // freed, not yet returned to the OS
	Goroutines int64         `json:"goroutines,omitempty"`
	Scrape     time.Duration `json:"scrape_ns,omitempty"`
}

// serverMemory collects garbage in the server and reads its Go memory from
// /metrics and its VmRSS. The scrape lists /proc/PID/fd, which fills the
// kernel's dentry and proc inode caches: read the kernel before.
func serverMemory(s *harness.Server) (procMem, error) {
	m, err := harness.ReadGoMemory(s)
	return procMem{RSS: m.RSS, HeapInuse: m.HeapInuse, StackInuse: m.StackInuse, HeapFree: m.HeapFree,
		Goroutines: m.Goroutines, Scrape: m.Scrape}, err
}

// forEach runs f(0) … f(n−1), jobs at a time, and joins their errors.
func forEach(n, jobs int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, max(jobs, 1))
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// envWith returns the environment with key set to val (val "" or "0": as it is).
func envWith(key, val string) []string {
	env := os.Environ()
	if val == "" || val == "0" {
		return env
	}
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, key+"=") {
			out = append(out, e)
		}
	}
	return append(out, key+"="+val)
}

// freePorts returns n distinct loopback ports that nothing listened on a
// moment ago: each is bound and released, all held until the last is found.
func freePorts(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	return out, nil
}

// startClient starts the load client of p against s.
func startClient(ctx context.Context, cfg *config, dir string, p part, s *harness.Server, control string, clientDuration time.Duration) (*clientProc, error) {
	name := fmt.Sprintf("client-%02d", p.index)
	c := &clientProc{part: p, control: control, done: make(chan struct{}),
		report:   filepath.Join(dir, name+".report.json"),
		timeline: filepath.Join(dir, name+".timeline.csv"),
		log:      filepath.Join(dir, name+".log"),
	}
	c.args = []string{
		"-server", s.Listen, "-admin", s.Admin.URL,
		"-users", p.users.String(), "-total-users", strconv.Itoa(cfg.conns),
		"-qps", "0", "-duration", clientDuration.String(),
		"-connect-rate", strconv.Itoa(p.connectRate),
		"-control", control, "-report", c.report, "-timeline", c.timeline,
	}
	if len(p.sources) > 0 {
		c.args = append(c.args, "-source", joinAddrs(p.sources))
	}
	c.args = append(c.args, strings.Fields(cfg.clientFlags)...)
	f, err := os.Create(c.log)
	if err != nil {
		return nil, err
	}
	c.logf = f
	// SIGTERM when ctx ends (the client then drains, reconciles and reports), SIGKILL 60 s later.
	c.cmd = harness.Command(ctx, 60*time.Second, filepath.Join(cfg.bin, "loadclient"), c.args...)
	c.cmd.Env = envWith("GOMAXPROCS", strconv.Itoa(cfg.clientProcs))
	c.cmd.Stdout, c.cmd.Stderr = f, f
	if err := withTimerSlack(cfg.clientSlack, c.cmd.Start); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() {
		c.err = c.cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

// exited says whether c has exited.
func (c *clientProc) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// signal sends sig to c unless it has exited.
func (c *clientProc) signal(sig syscall.Signal) {
	if !c.exited() {
		c.cmd.Process.Signal(sig)
	}
}

// tail returns the last lines of c's log, for an error message.
func (c *clientProc) tail(n int) string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// readReport reads c's -report file.
func (c *clientProc) readReport() error {
	b, err := os.ReadFile(c.report)
	if err != nil {
		return err
	}
	var r loadclient.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", c.report, err)
	}
	c.rep = &r
	return nil
}

var controlClient = &http.Client{Timeout: 5 * time.Second}

// setQPS asks c's control API for a total rate of qps from the next whole
// second at least 50 ms away, and returns that second.
func (c *clientProc) setQPS(qps int) (time.Time, error) {
	resp, err := controlClient.Get(fmt.Sprintf("http://%s/qps?set=%d", c.control, qps))
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return time.Time{}, fmt.Errorf("client %d: /qps?set=%d: %s: %s", c.part.index, qps, resp.Status, body)
	}
	var ans struct {
		From string `json:"from"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return time.Time{}, fmt.Errorf("client %d: /qps answer %q: %w", c.part.index, body, err)
	}
	t, err := time.Parse(time.RFC3339, ans.From)
	if err != nil {
		return time.Time{}, fmt.Errorf("client %d: /qps answer %q: %w", c.part.index, body, err)
	}
	return t, nil
}
