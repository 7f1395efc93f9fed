package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/jsjournal"
)

// stream is the journal's JetStream stream, as the gateways name it.
const stream = "hongbao_journal"

// audit is one SET's journal: as the watch saw every message of it, and
// as a claimant replays it at the end from its newest snapshot.
type audit struct {
	Set      int    `json:"set"`
	Owner    int    `json:"owner"` // the last claim's node (-1: none)
	Name     string `json:"owner_name"`
	Epoch    uint64 `json:"epoch"`
	Claims   int    `json:"claims"`
	Messages int    `json:"messages"`
	// Dropped: rounds not from the owner by the claims before them (fencing
	// must refuse them), or appended without the expected last sequence.
	Dropped         int    `json:"dropped"`
	Replayed        int    `json:"replayed_messages"`
	ReplayedDropped int    `json:"replayed_dropped"`
	Err             string `json:"error,omitempty"`
}

// watch reads every message of the journal's stream as it is appended,
// the whole history (snapshots purge the stream behind them), and writes
// each as a line of journal.csv.
type watch struct {
	mu    sync.Mutex
	sets  []*audit // by SET
	last  uint64   // the last stream sequence read
	csv   *os.File
	start time.Time
	cc    jetstream.ConsumeContext
	js    jetstream.JetStream
}

func startWatch(ctx context.Context, nc *nats.Conn, sets int, file string, start time.Time) (*watch, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	w := &watch{start: start, js: js}
	for s := range sets {
		w.sets = append(w.sets, &audit{Set: s, Owner: -1})
	}
	if w.csv, err = os.Create(file); err != nil {
		return nil, err
	}
	fmt.Fprintln(w.csv, "seq,t_s,subject,gateway,claim_epoch,release,expected_last,bytes")
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"hongbao.j.>"}})
	if err == nil {
		w.cc, err = cons.Consume(w.take)
	}
	if err != nil {
		w.csv.Close()
		return nil, fmt.Errorf("watching %s: %w", stream, err)
	}
	return w, nil
}

// take is one message of the stream.
func (w *watch) take(m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	h := m.Headers()
	gw, claim, release := h.Get(jsjournal.HeaderGateway), h.Get(jsjournal.HeaderClaim), h.Get(jsjournal.HeaderRelease)
	after := h.Get(jetstream.ExpectedLastSubjSeqHeader)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = md.Sequence.Stream
	fmt.Fprintf(w.csv, "%d,%.3f,%s,%s,%s,%s,%s,%d\n", md.Sequence.Stream, md.Timestamp.Sub(w.start).Seconds(), m.Subject(), gw, claim, release, after, len(m.Data()))
	var set, node int
	var kind string
	if n, _ := fmt.Sscanf(strings.ReplaceAll(m.Subject(), ".", " "), "hongbao j %d %d %s", &set, &node, &kind); n != 3 || set < 0 || set >= len(w.sets) {
		return
	}
	a := w.sets[set]
	a.Messages++
	switch {
	case after == "":
		a.Dropped++
	case claim != "" && release != "":
		a.Owner, a.Name = -1, ""
	case claim != "":
		a.Claims++
		a.Owner, a.Name = node, gw
		fmt.Sscan(claim, &a.Epoch)
	case node != a.Owner:
		a.Dropped++
	}
}

// end waits until the watch has read the stream's last message (within
// timeout), stops it and returns what it saw, by SET.
func (w *watch) end(ctx context.Context, timeout time.Duration) ([]audit, error) {
	defer w.csv.Close()
	defer w.cc.Stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last uint64
	for {
		if st, err := w.js.Stream(ctx, stream); err == nil {
			if info, err := st.Info(ctx); err == nil {
				last = info.State.LastSeq
			}
		}
		w.mu.Lock()
		done := last > 0 && w.last >= last
		w.mu.Unlock()
		if done {
			break
		}
		if ctx.Err() != nil {
			return w.list(), fmt.Errorf("the watch read the stream up to %d of %d", w.last, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return w.list(), nil
}

func (w *watch) list() []audit {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]audit, len(w.sets))
	for _, a := range w.sets {
		out[a.Set] = *a
	}
	return out
}

// replay replays every SET's journal from JetStream (its newest snapshot
// on) as a claimant would: the messages that are not the owner's rounds,
// which JetStream must have refused.
func (w *watch) replay(ctx context.Context, nc *nats.Conn, name string, l jsjournal.Layout) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := jsjournal.Open(ctx, jsjournal.Options{Conn: nc, Layout: l, Gateway: name})
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range w.sets {
		rep, err := st.Load(ctx, a.Set, func(jsjournal.Snapshot) error { return nil }, func(journal.Record) error { return nil })
		w.mu.Lock()
		a.Replayed, a.ReplayedDropped = rep.Messages, rep.Dropped
		if err != nil {
			a.Err = err.Error()
			errs = append(errs, fmt.Errorf("SET %d: %w", a.Set, err))
		}
		w.mu.Unlock()
	}
	return errors.Join(errs...)
}

// dropped sums the audits' dropped messages, seen live and replayed.
func dropped(audits []audit) (int, string) {
	n := 0
	var sets []string
	for _, a := range audits {
		if d := max(a.Dropped, a.ReplayedDropped); d > 0 {
			n += d
			sets = append(sets, fmt.Sprintf("SET %d: %d", a.Set, d))
		}
	}
	return n, strings.Join(sets, ", ")
}
