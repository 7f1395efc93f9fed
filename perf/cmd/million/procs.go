package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
)

// The memory readings of a run: servers idle before the ramp, every
// connection up and idle after it, and at the end of the load.
const (
	readIdle = iota
	readRamped
	readEnd
)

// serverProc is one server process.
type serverProc struct {
	part part
	srv  *harness.Server
	args []string

	mem      [3]harness.Memory // by reading
	stats    harness.Stats     // after the load clients left
	camps    []harness.Campaign
	checks   []harness.LedgerCheck
	exitCode int
	exitErr  error
}

// ok says whether the server's ledger was read and holds.
func (p *serverProc) ok() bool { return len(p.checks) > 0 && len(harness.FailedChecks(p.checks)) == 0 }

// clientProc is one load-client process.
type clientProc struct {
	*harness.Client
	part    part
	control string   // host:port of its -control API
	rss     [3]int64 // VmRSS by reading (none idle)
	rep     *loadclient.Report
}

// forEach runs f(0) … f(n−1), jobs at a time, and joins their errors.
func forEach(n, jobs int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, max(jobs, 1))
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// gomaxprocs is the environment of a child with n Ps (0: the Go default).
func gomaxprocs(n int) []string {
	if n <= 0 {
		return nil
	}
	return []string{"GOMAXPROCS=" + strconv.Itoa(n)}
}

// startClient starts the load client of p against s: -qps 0 until million
// sets the rate through its -control, and a -duration that only bounds a
// client whose parent vanished without the kernel killing it.
func startClient(ctx context.Context, cfg *config, dir string, p part, s *harness.Server, control string, duration time.Duration) (*clientProc, error) {
	flags := []string{"-total-users", strconv.Itoa(cfg.conns), "-qps", "0", "-duration", duration.String(),
		"-connect-rate", strconv.Itoa(p.connectRate), "-control", control}
	// SIGTERM when ctx ends (the client then drains, reconciles and reports), SIGKILL 60 s later.
	c, err := harness.StartClient(ctx, s, harness.ClientConfig{
		Bin: cfg.Client(), Dir: dir, Name: fmt.Sprintf("client-%02d", p.index), Users: p.users.String(), Flags: flags,
		Source: joinAddrs(p.sources), More: cfg.clientFlags, Grace: 60 * time.Second,
		Env: gomaxprocs(cfg.clientProcs), Spawn: timerSlack(cfg.clientSlack),
	})
	if err != nil {
		return nil, fmt.Errorf("load client %d: %w", p.index, err)
	}
	return &clientProc{Client: c, part: p, control: control}, nil
}

// tail returns the last lines of c's log, for an error message.
func (c *clientProc) tail(n int) string {
	b, err := os.ReadFile(c.Log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
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
		From time.Time `json:"from"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return time.Time{}, fmt.Errorf("client %d: /qps answer %q: %w", c.part.index, body, err)
	}
	return ans.From, nil
}
