package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Loop calls a function now and then again at the times a schedule gives,
// on a goroutine of its own, until Stop.
type Loop struct {
	stop context.CancelFunc
	done chan struct{}
}

// Repeat calls take at once and then at each next(now) until ctx is done or
// Stop is called; a take that runs late makes next skip the missed times,
// not run them in a burst.
func Repeat(ctx context.Context, next func(now time.Time) time.Time, take func()) *Loop {
	ctx, cancel := context.WithCancel(ctx)
	l := &Loop{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			take()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(next(time.Now()))):
			}
		}
	}()
	return l
}

// Stop ends the loop and waits for a take under way: after it, take is not
// called again.
func (l *Loop) Stop() {
	l.stop()
	<-l.done
}

// Every is the schedule of a grid of period from now: a late take skips to
// the next point of the grid.
func Every(period time.Duration) func(time.Time) time.Time {
	t0 := time.Now()
	return func(now time.Time) time.Time { return t0.Add((now.Sub(t0)/period + 1) * period) }
}

// SecondsAt is the schedule of every whole second plus off: away from the
// load client's ticks and rate changes, which fall on whole seconds.
func SecondsAt(off time.Duration) func(time.Time) time.Time {
	return func(now time.Time) time.Time {
		next := now.Truncate(time.Second).Add(off)
		if !next.After(now) {
			next = next.Add(time.Second)
		}
		return next
	}
}

// Sample is a server at one moment: what /proc says and a /metrics scrape.
type Sample struct {
	At      time.Time
	RSS     int64         // bytes, VmRSS
	CPU     time.Duration // utime + stime, all threads
	FDs     int64         // entries of /proc/PID/fd, when sampled
	Client  time.Duration // the load client's utime + stime; 0 before it runs
	Machine time.Duration // every CPU's busy time (/proc/stat): everyone's work
	Metrics map[string]float64
	Scrape  time.Duration // the forced GC, if any, and GET /metrics
	Err     error
}

// Metric returns series name of the scrape, 0 when it has none.
func (s *Sample) Metric(name string) float64 { return s.Metrics[name] }

// Shakes is every SHAKE the server answered so far: got, empty, overload.
func (s *Sample) Shakes() float64 {
	return s.Metric(`hongbao_shake_total{result="got"}`) + s.Metric(`hongbao_shake_total{result="empty"}`) + s.Metric(`hongbao_shake_total{result="overload"}`)
}

// SampleOptions says what a sample reads beyond RSS, CPU and /metrics.
type SampleOptions struct {
	GC      bool     // collect garbage first: heap figures of live memory
	FDs     bool     // count /proc/PID/fd
	Require []string // series the scrape must have, else Err says so
}

// ReadSample reads srv now, and the CPU of clientPID (0: none).
func ReadSample(srv *Server, clientPID int, o SampleOptions) Sample {
	s := Sample{At: time.Now()}
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	s.RSS, err = RSS(srv.PID)
	note(err)
	s.CPU, err = CPUTime(srv.PID)
	note(err)
	if o.FDs {
		s.FDs, err = CountFDs(srv.PID)
		note(err)
	}
	if clientPID > 0 {
		s.Client, _ = CPUTime(clientPID) // gone after its run: 0
	}
	s.Machine, _ = MachineBusy()
	t0 := time.Now()
	if o.GC {
		note(srv.Admin.GC())
	}
	s.Metrics, err = srv.Admin.Metrics()
	s.Scrape = time.Since(t0)
	note(err)
	for _, name := range o.Require {
		if _, ok := s.Metrics[name]; !ok && err == nil {
			note(fmt.Errorf("the server's /metrics has no %s", name))
		}
	}
	s.Err = errors.Join(errs...)
	return s
}

// Sampler reads a server on a schedule, in the background, until Stop.
type Sampler struct {
	srv      *Server
	opts     SampleOptions
	client   atomic.Int64 // the load client's pid, once it runs
	progress func(s, prev *Sample)
	mu       sync.Mutex
	samples  []Sample
	loop     *Loop
}

// StartSampler samples srv now and then at every next(now); progress, if
// not nil, gets each sample and the one before (nil at first).
func StartSampler(ctx context.Context, srv *Server, next func(time.Time) time.Time, o SampleOptions, progress func(s, prev *Sample)) *Sampler {
	s := &Sampler{srv: srv, opts: o, progress: progress}
	s.loop = Repeat(ctx, next, s.take)
	return s
}

// SetClient makes the samples read the CPU of the load client pid too.
func (s *Sampler) SetClient(pid int) { s.client.Store(int64(pid)) }

func (s *Sampler) take() {
	sm := ReadSample(s.srv, int(s.client.Load()), s.opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, sm)
	if s.progress != nil {
		var prev *Sample
		if n := len(s.samples); n > 1 {
			prev = &s.samples[n-2]
		}
		s.progress(&s.samples[len(s.samples)-1], prev)
	}
}

// Stop takes a last sample and returns them all, oldest first.
func (s *Sampler) Stop() []Sample {
	s.loop.Stop()
	s.take()
	return s.samples
}
