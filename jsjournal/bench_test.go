package jsjournal

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/journal"
)

// Rounds on an embedded single-node JetStream: G groups (SETs) each with
// two producers (shake and split) appending R SHAKE-sized records (12 bytes
// of payload) between them, published, then waited for — one round, what a
// money answer waits for. Each reports the round's p50 and p99 and the
// process's CPU per round (server and client: the JetStream server runs in
// this process). Layouts: one stream with a subject per SET (the Store), and
// a stream per SET (the rival); sync: every write synced before its ack
// (sync_interval: always, production's) or the server's default interval.
//
//	go test -run '^$' -bench Round -benchtime 2s -benchmem ./jsjournal/
func BenchmarkRound(b *testing.B) {
	for _, sync := range []string{"always", "default"} {
		for _, layout := range []string{"subjects", "streams"} {
			for _, g := range []int{1, 8, 32} {
				for _, r := range []int{2, 32} {
					b.Run(fmt.Sprintf("sync=%s/layout=%s/groups=%d/records=%d", sync, layout, g, r), func(b *testing.B) {
						benchRound(b, sync == "always", layout == "streams", g, r)
					})
				}
			}
		}
	}
}

// startBenchJS runs a JetStream server in the process, synced as asked.
func startBenchJS(tb testing.TB, always bool) string {
	tb.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: tb.TempDir(), SyncAlways: always, NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		tb.Fatal("JetStream not ready")
	}
	tb.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchRound(b *testing.B, always, perStream bool, groups, perGroup int) {
	benchRoundOn(b, startBenchJS(b, always), 1, perStream, groups, perGroup)
}

func benchRoundOn(b *testing.B, url string, replicas int, perStream bool, groups, perGroup int) {
	s := openStore(b, url, 0, func(o *Options) { o.Layout.Replicas = replicas })
	var sink journal.Sink = s
	if perStream {
		sink = newStreamPerSet(b, s, groups, replicas)
	}
	j, err := journal.Open(journal.Options{Sink: sink, RoundEvery: -1})
	if err != nil {
		b.Fatal(err)
	}
	ps := make([]*journal.Producer, 0, 2*groups)
	for g := range groups {
		ps = append(ps, j.ProducerIn(g), j.ProducerIn(g))
	}
	if err := j.Start(); err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	for g := range groups {
		if err := j.Reopen(g, 0); err != nil {
			b.Fatal(err)
		}
	}
	payload := make([]byte, 12)
	pos := make([]uint64, len(ps))
	round := func(i int) {
		for _, p := range ps {
			for k := range perGroup / 2 {
				binary.BigEndian.PutUint64(payload, uint64(i*perGroup+k))
				pos[p.ID()] = p.Append(0x7f, payload)
			}
		}
		for _, p := range ps { // the first wakes the writer: the rest are published by the time it gathers, mostly
			p.Publish()
		}
		for _, p := range ps {
			if err := p.Wait(pos[p.ID()]); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := range 20 { // streams, consumers of the reply subjects and the write path warm
		round(-i)
	}
	lat := make([]time.Duration, 0, b.N)
	rounds0 := j.M.Rounds.Load()
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := range b.N {
		t := time.Now()
		round(i)
		lat = append(lat, time.Since(t))
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/round")
	b.ReportMetric(float64(b.N*groups*perGroup)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(j.M.Rounds.Load()-rounds0)/float64(b.N), "journal-rounds/op")
}

// streamPerSet is the rival layout: a stream per SET, each its own Raft
// group in a cluster, published to exactly as Store.Commit does.
type streamPerSet struct {
	*Store
	futs []jetstream.PubAckFuture
}

func newStreamPerSet(tb testing.TB, s *Store, groups, replicas int) *streamPerSet {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for g := range groups {
		name := "bench_set" + strconv.Itoa(g)
		if _, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"bench.set." + strconv.Itoa(g)},
			Storage: jetstream.FileStorage, Replicas: replicas, MaxMsgs: -1, MaxBytes: -1, Discard: jetstream.DiscardNew, DenyDelete: true}); err != nil {
			tb.Fatal(err)
		}
	}
	return &streamPerSet{Store: s}
}

func (s *streamPerSet) Commit(batches []journal.Batch) {
	if cap(s.futs) < len(batches) {
		s.futs = make([]jetstream.PubAckFuture, len(batches))
	}
	futs := s.futs[:len(batches)]
	for i := range batches {
		b := &batches[i]
		m := &nats.Msg{Subject: "bench.set." + strconv.Itoa(b.Group), Data: b.Data, Header: nats.Header{HeaderGateway: s.gw}}
		f, err := s.js.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(b.ExpectLast), jetstream.WithRetryAttempts(0))
		futs[i] = f
		if err != nil {
			b.Err = appendError(m.Subject, err)
		}
	}
	for i, f := range futs {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			batches[i].Seq = ack.Sequence
		case err := <-f.Err():
			batches[i].Err = appendError(f.Msg().Subject, err)
		}
		futs[i] = nil
	}
}

// BenchmarkReplay: records replayed a second from an embedded JetStream,
// a group of a million SHAKE-sized records in messages of R records (a
// round's share of one SET).
//
//	go test -run '^$' -bench Replay -benchtime 3x ./jsjournal/
func BenchmarkReplay(b *testing.B) {
	for _, r := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("records-per-message=%d", r), func(b *testing.B) { benchReplay(b, r) })
	}
}

func benchReplayWith(b *testing.B, perMsg int, direct bool) {
	records := 1_000_000
	if perMsg == 1 {
		records = 100_000 // a message each: the per-message cost
	}
	url := startBenchJS(b, false) // the writes' sync is not what is measured
	s := openStore(b, url, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	subject := s.Subject(0, 0)
	// The owner's claim first (message 1), then its rounds, each fenced as
	// the journal's are: the stream is this benchmark's alone, so message
	// k+1 follows message k.
	prev, err := s.AppendClaim(ctx, 0, 1, 0)
	if err != nil {
		b.Fatal(err)
	}
	var data []byte
	payload := make([]byte, 12)
	var futs []jetstream.PubAckFuture
	for i := 0; i < records; {
		data = data[:0]
		for k := 0; k < perMsg && i < records; k++ {
			binary.BigEndian.PutUint64(payload, uint64(i))
			data = journal.AppendRecord(data, 0x7f, uint16(k%2), payload)
			i++
		}
		f, err := s.js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: append([]byte(nil), data...), Header: nats.Header{HeaderGateway: s.gw}},
			jetstream.WithExpectLastSequenceForSubject(prev, s.l.SetFilter(0)))
		if err != nil {
			b.Fatal(err)
		}
		prev++
		futs = append(futs, f)
		if len(futs) == 4000 {
			waitAll(b, futs)
			futs = futs[:0]
		}
	}
	waitAll(b, futs)
	if direct {
		info, err := s.stream.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		cfg := info.Config
		cfg.AllowDirect = true
		if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		n := 0
		count := func(r journal.Record) error { n++; return nil }
		if direct {
			last, err := s.Last(ctx, 0)
			if err == nil {
				err = replayDirect(ctx, s, subject, 2, last.Seq, func(data []byte) error {
					for off := 0; off < len(data); {
						r, k, err := journal.Decode(data[off:])
						if err != nil {
							return err
						}
						off += k
						count(r)
					}
					return nil
				})
			}
			if err != nil || n != records {
				b.Fatalf("%d records, %v", n, err)
			}
			continue
		}
		r, err := s.Replay(ctx, 0, Snapshot{}, count)
		if err != nil || n != records {
			b.Fatalf("%d records, %+v, %v", n, r, err)
		}
	}
	b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func waitAll(tb testing.TB, futs []jetstream.PubAckFuture) {
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			tb.Fatal(err)
		}
	}
}

// BenchmarkReplayDirect is the rival of Replay's ordered consumer: batched
// direct gets ($JS.API.DIRECT.GET with next_by_subj and batch), which need
// the stream's allow_direct and may be answered by a replica behind the
// leader.
//
//	go test -run '^$' -bench ReplayDirect -benchtime 3x ./jsjournal/
func BenchmarkReplayDirect(b *testing.B) {
	for _, r := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("records-per-message=%d", r), func(b *testing.B) { benchReplayWith(b, r, true) })
	}
}

func benchReplay(b *testing.B, perMsg int) { benchReplayWith(b, perMsg, false) }

// replayDirect reads subject's messages from seq to last with batched
// direct gets, handing each message's data to fn.
func replayDirect(ctx context.Context, s *Store, subject string, seq, last uint64, fn func(data []byte) error) error {
	nc := s.o.Conn
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	sub.SetPendingLimits(-1, -1)
	for seq <= last {
		req := fmt.Sprintf(`{"seq":%d,"next_by_subj":%q,"batch":1024,"up_to_seq":%d}`, seq, subject, last)
		if err := nc.PublishRequest("$JS.API.DIRECT.GET."+s.l.Stream(), inbox, []byte(req)); err != nil {
			return err
		}
		for {
			m, err := sub.NextMsgWithContext(ctx)
			if err != nil {
				return err
			}
			if st := m.Header.Get("Status"); st != "" {
				if st != "204" {
					return fmt.Errorf("direct get from %d: status %s %s", seq, st, m.Header.Get("Description"))
				}
				break
			}
			n, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			if err != nil {
				return err
			}
			if err := fn(m.Data); err != nil {
				return err
			}
			seq = n + 1
		}
	}
	return nil
}

// BenchmarkRoundR3 is BenchmarkRound on a cluster of three JetStream
// servers in this process, the stream (or each SET's stream) of three
// replicas: where a stream per SET is a Raft group per SET. Synced at every
// write (production's), and, for the one stream, at the server's default
// interval: what sync_interval: always costs.
//
//	go test -run '^$' -bench RoundR3 -benchtime 2s ./jsjournal/
func BenchmarkRoundR3(b *testing.B) {
	for _, sync := range []string{"always", "default"} {
		for _, layout := range []string{"subjects", "streams"} {
			if sync == "default" && layout == "streams" {
				continue // the layouts are compared as production runs
			}
			for _, g := range []int{8, 32} {
				b.Run(fmt.Sprintf("sync=%s/layout=%s/groups=%d/records=2", sync, layout, g), func(b *testing.B) {
					url := startBenchCluster(b, sync == "always")
					benchRoundOn(b, url, 3, layout == "streams", g, 2)
				})
			}
		}
	}
}

// startBenchCluster runs three clustered JetStream servers, synced at every
// write if always, and returns their client URLs once JetStream answers.
func startBenchCluster(tb testing.TB, always bool) string {
	tb.Helper()
	var lns []net.Listener
	for range 6 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		lns = append(lns, ln)
	}
	port := func(i int) int { return lns[i].Addr().(*net.TCPAddr).Port }
	var routes, urls []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", port(2*i+1)))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", port(2*i)))
	}
	for _, ln := range lns {
		ln.Close()
	}
	for i := range 3 {
		ns, err := server.NewServer(&server.Options{ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: port(2 * i),
			JetStream: true, StoreDir: tb.TempDir(), SyncAlways: always, NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "bench", Host: "127.0.0.1", Port: port(2*i + 1)},
			Routes:  server.RoutesFromStr(strings.Join(routes, ","))})
		if err != nil {
			tb.Fatal(err)
		}
		go ns.Start()
		tb.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		if !ns.ReadyForConnections(10 * time.Second) {
			tb.Fatal("a clustered server not ready")
		}
	}
	url := strings.Join(urls, ",")
	nc := dial(tb, url)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	eventually(tb, "the cluster's JetStream", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
	return url
}

// BenchmarkSnapshot: a SET's snapshot of S bytes put into the Object Store
// (chunked, each chunk synced: sync_interval: always) and read back, as a
// claimant loads it, on an embedded single-node JetStream; MB/s of each.
//
//	go test -run '^$' -bench Snapshot -benchtime 3x ./jsjournal/
func BenchmarkSnapshot(b *testing.B) {
	for _, size := range []int{1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("bytes=%d", size), func(b *testing.B) {
			s := openStore(b, startBenchJS(b, true), 0, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(i * 7919)
			}
			var put, get time.Duration
			b.ResetTimer()
			for i := range b.N {
				// A claim, and a round for the snapshot to replay from.
				claim, err := s.AppendClaim(ctx, 0, uint64(i+1), uint64(2*i))
				if err != nil {
					b.Fatal(err)
				}
				ack, err := s.js.PublishMsg(ctx, s.message(&journal.Batch{Group: 0}), jetstream.WithExpectLastSequenceForSubject(claim, s.l.SetFilter(0)))
				if err != nil {
					b.Fatal(err)
				}
				t := time.Now()
				if err := s.PutSnapshot(ctx, 0, Snapshot{ID: uint64(i + 1), Seq: ack.Sequence, Epoch: uint64(i + 1), ClaimSeq: claim, Parts: []Part{{PID: 0, Data: data}}}); err != nil {
					b.Fatal(err)
				}
				put += time.Since(t)
				t = time.Now()
				snap, ok, err := s.GetSnapshot(ctx, 0)
				if err != nil || !ok || len(snap.Parts) != 1 || len(snap.Parts[0].Data) != size {
					b.Fatalf("snapshot read back: %v, %v", ok, err)
				}
				get += time.Since(t)
			}
			mb := float64(size) * float64(b.N) / 1e6
			b.ReportMetric(mb/put.Seconds(), "put-MB/s")
			b.ReportMetric(mb/get.Seconds(), "get-MB/s")
		})
	}
}
