package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hongbao-io/hongbao/client/wire"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/proto"
)

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
func runOpen(ctx context.Context, cfg config, r *harness.Run) error {
	sets := cfg.sets &^ 1 // even: user u's gateway is u mod 2
	cl, stop, err := newCluster(ctx, &cfg, r, sets, 2)
	if err != nil {
		return err
	}
	defer stop()
	if err := cl.Start(ctx, 2); err != nil {
		return err
	}
	dur := cfg.duration.Round(time.Second)
	fmt.Fprintf(r.Stdout, "democluster -mode open: 2 gateways, %d SETs, %d OPEN/s for %v per kind in %d alternated rounds, %d recipients a SEND; files in %s/\n", sets, cfg.openRate, dur, cfg.openRounds, cfg.camps.Recipients, r.Dir)
	// Users 2, 4, … run on gateway 0 and 1, 3, … on gateway 1 (SET u mod
	// sets, gateway SET mod 2). Senders and local openers on gateway 0,
	// crossing openers on gateway 1.
	var all []*wire.Conn
	defer func() { closeAll(all) }()
	login := func(first uint32, gw int) ([]*wire.Conn, error) {
		for i := range cfg.connsPerGW {
			c, err := wire.DialLogin(cl.Gateways[gw].Srv.Listen, first+2*uint32(i))
			if err != nil {
				return nil, err
			}
			all = append(all, c)
		}
		return all[len(all)-cfg.connsPerGW:], nil
	}
	senders, err := login(2, 0)
	if err != nil {
		return err
	}
	cross, err := login(1, 1)
	if err != nil {
		return err
	}
	local, err := login(2+2*uint32(cfg.connsPerGW), 0)
	if err != nil {
		return err
	}
	before, _ := harness.ReadCrossings(cl.Admin(1))
	phases := []struct {
		name    string
		openers []*wire.Conn
	}{{"crossing (opener on gateway 1, envelope on gateway 0)", cross}, {"local (opener and envelope on gateway 0)", local}}
	results := make([]openResult, len(phases))
	lats := make([][]int64, len(phases))
	for round := range cfg.openRounds {
		for i, ph := range phases {
			r, l := openPhase(ctx, ph.openers, senders, cfg.openRate, cfg.camps.Recipients, dur/time.Duration(cfg.openRounds), round == cfg.openRounds-1)
			results[i].add(r)
			lats[i] = append(lats[i], l...)
		}
	}
	for i, ph := range phases {
		results[i].Phase = ph.name
		results[i].quantiles(lats[i])
	}
	after, _ := harness.ReadCrossings(cl.Admin(1))
	var txt strings.Builder
	fmt.Fprintf(&txt, "\nOPEN latency (write to OPEN_RESULT), %s, 2 gateways, %d OPEN/s target:\n", time.Now().UTC().Format("2006-01-02 15:04"), cfg.openRate)
	for _, r := range results {
		fmt.Fprintf(&txt, "  %-52s %6d SENDs, %7d OPENs (%.0f/s), status %v: p50 %s, p90 %s, p99 %s, p99.9 %s, max %s\n", r.Phase, r.Sends, r.Opens, r.Rate, r.Status,
			harness.Ms(r.Lat["p50"]), harness.Ms(r.Lat["p90"]), harness.Ms(r.Lat["p99"]), harness.Ms(r.Lat["p99.9"]), harness.Ms(r.Lat["max"]))
	}
	fmt.Fprintf(&txt, "  gateway 1: %.0f events sent, %.0f received over NATS, %.0f crossings timed out\n",
		after.Sent-before.Sent, after.Received-before.Received, after.TimedOut-before.TimedOut)
	report(r, "democluster -mode open", txt.String(), results, "gateway*.log, n0.log")
	closeAll(all)
	return cl.Stop(30 * time.Second)
}

func closeAll(cs []*wire.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// readUntil calls fn with every frame c receives until stop is closed or
// c fails.
func readUntil(c *wire.Conn, stop <-chan struct{}, fn func(proto.Frame)) {
	for {
		f, err := c.Next(200 * time.Millisecond)
		if err == nil {
			fn(f)
			continue
		}
		select {
		case <-stop:
			return
		default:
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
	}
}

// openPhase SENDs from senders to recips random openers at rate/recips a
// second for dur; each opener OPENs every ENVELOPE pushed to it at once.
// The latency of an OPEN runs from its write to its OPEN_RESULT. It returns
// the phase's counts and latencies. A phase of the last round waits 2 s for
// the OPENs in flight; another waits less: an answer it misses is read, with
// its own stamp, by the next phase of its kind.
func openPhase(ctx context.Context, openers, senders []*wire.Conn, rate, recips int, dur time.Duration, last bool) (openResult, []int64) {
	var mu sync.Mutex
	var lats []int64
	status := map[uint8]int{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, o := range openers {
		wg.Go(func() {
			var out []byte
			readUntil(o, stop, func(f proto.Frame) {
				switch f.Type {
				case proto.Envelope:
					env, _, _, _ := f.Envelope()
					out = proto.AppendOpen(out[:0], uint64(time.Now().UnixNano()), env)
					o.Write(out)
				case proto.OpenResult:
					st, _, _ := f.OpenResult()
					mu.Lock()
					lats = append(lats, time.Now().UnixNano()-int64(f.Stamp))
					status[st]++
					mu.Unlock()
				}
			})
		})
	}
	for _, s := range senders { // drain SEND_ACKs
		wg.Go(func() { readUntil(s, stop, func(proto.Frame) {}) })
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
			for i, p := range rand.Perm(len(openers))[:recips] {
				rcpt[i] = openers[p].User
			}
			buf = proto.AppendSend(buf[:0], uint64(sends+1), uint32(100*recips), rcpt)
			senders[sends%len(senders)].Write(buf)
		}
	}
	tick.Stop()
	elapsed := time.Since(start)
	if last {
		time.Sleep(2 * time.Second)
	} else {
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for _, c := range append(slices.Clone(openers), senders...) {
		c.SetReadDeadline(time.Time{})
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
