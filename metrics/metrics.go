// Package metrics writes a server's own families of GET /metrics in the
// Prometheus text format: computed at scrape time from the counters the
// stages, event loops, journal and cluster keep (nothing on the hot path
// but their owners' atomic adds), each family with its HELP and TYPE.
// docs/OPERATING.md lists them with the alerts that read them.
package metrics

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/hongbao-io/hongbao/buildinfo"
	"github.com/hongbao-io/hongbao/campaign"
	"github.com/hongbao-io/hongbao/cluster"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/exposition"
	"github.com/hongbao-io/hongbao/flightrec"
	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/jsjournal"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/replicated"
)

// Sources are what a scrape reads: the server's parts (nil where it does
// not run them) and the figures it keeps itself.
type Sources struct {
	Pipeline, Egress, IngressMode string // -pipeline, -egress, -ingress
	Sets                          int    // -sets: the cluster's SETs
	MaxConns                      int    // connections admitted at most; 0 no bound

	Stats      ledger.Stats        // GET /stats, summed over the SETs
	Ledgers    []*ledger.Ledger    // the local SETs' counters
	Ingress    *ingress.Ingress    // the event loops
	Bus        *event.Bus          // nil with -pipeline=none
	Campaigns  *campaign.Runner    // nil without campaigns
	SlowTrace  *flightrec.Recorder // -trace-slow; nil when off
	Journal    *journal.Journal    // -journal on; else nil
	Node       *cluster.Node       // a gateway's membership (-nats); else nil
	Replicated *replicated.SETs    // -journal jetstream; else nil

	Recovery      time.Duration // the start's snapshot load and replay
	Snapshots     uint64        // snapshots written
	SnapshotTime  time.Duration // the last snapshot's
	SnapshotBytes uint64        // the last snapshot file's size
}

// Write writes the server's own families, read from s now.
func Write(w io.Writer, s Sources) {
	e := exposition.Writer{W: w}
	st, ist, ls := s.Stats, s.Ingress.Stats(), s.Ledgers
	var bytesOut, writes, dropped, cutOff uint64
	var online, held, queued int64
	var popped, returned, openOK, untold, shakeUntold uint64
	var replays, expired [3]uint64 // shake, open, send
	var kept int64
	for _, l := range ls {
		shakeUntold += l.Egress.ShakeUntold.Load()
		replays[0] += l.Shake.Replayed.Load()
		replays[1] += l.Split.OpenReplayed.Load()
		replays[2] += l.Split.SendReplayed.Load()
		expired[0] += l.Shake.Expired.Load()
		expired[1] += l.Split.OpenExpired.Load()
		expired[2] += l.Split.SendExpired.Load()
		kept += l.Shake.RequestIDs.Load() + l.Split.RequestIDs.Load()
		bytesOut += l.Egress.Bytes.Load()
		writes += l.Egress.Writes.Load()
		dropped += l.Egress.Dropped.Load()
		cutOff += l.Egress.CutOff.Load()
		online += l.Session.Online.Load()
		held += l.Split.Held.Load()
		queued += l.Split.Queued.Load()
		popped += l.Shake.Popped.Load()
		returned += l.Shake.Returned.Load()
		openOK += l.Split.OpenStatus[proto.OpenOK].Load()
		untold += l.Egress.OpenUntold.Load()
	}

	bi := buildinfo.Read()
	e.Family("hongbao_build_info", "gauge", "The build the server runs, in its labels: module version, Go version, VCS revision (-dirty: with uncommitted changes). Always 1.")
	e.Sample(fmt.Sprintf("hongbao_build_info{version=%q,goversion=%q,revision=%q}", bi.Version, bi.GoVersion, bi.Revision), 1)
	// The variant under comparison (make perf-compare), for whoever reads a scrape later.
	e.Family("hongbao_config_info", "gauge", "The server's -pipeline, -egress and -ingress, in its labels. Always 1.")
	e.Sample(fmt.Sprintf("hongbao_config_info{pipeline=%q,egress=%q,ingress=%q}", s.Pipeline, s.Egress, s.IngressMode), 1)

	e.Gauge("hongbao_connections", "Client connections open now, logged in or not.", int64(s.Ingress.Conns()))
	e.Gauge("hongbao_connections_max", "Client connections admitted at most: -max-conns within the open-files limit less the descriptors kept for the admin API (0: no bound). Past it, connections are closed at accept.", int64(s.MaxConns))
	e.Counter("hongbao_accepted_total", "Client connections accepted.", ist.Accepted)
	e.Counter("hongbao_refused_total", "Client connections closed at accept for -max-conns.", ist.Refused)
	e.Counter("hongbao_logins_total", "LOGINs accepted.", st.Logins)
	e.Gauge("hongbao_users_online", "Users logged in now.", online)

	e.Family("hongbao_shake_total", "counter", "SHAKEs answered, by result: got an envelope (counted when it is taken from the pool: see hongbao_shake_returned_total), found the pool empty, or refused as overloaded.")
	e.Sample(`hongbao_shake_total{result="got"}`, popped)
	e.Sample(`hongbao_shake_total{result="empty"}`, st.Shake.Empty)
	e.Sample(`hongbao_shake_total{result="overload"}`, st.Shake.Overload)
	e.Family("hongbao_shed_total", "counter", "Requests answered overloaded at once because they had waited longer than -shed-delay in the kernel before being read (part of the overload results), by type.")
	e.Sample(`hongbao_shed_total{type="shake"}`, ist.Shed.Shake)
	e.Sample(`hongbao_shed_total{type="chat"}`, ist.Shed.Chat)
	// The two families an overload ratio needs: every request read, refused
	// or not (hongbao_latency_seconds counts only those answered past the
	// door), and the refusals of every type, not SHAKE's only.
	e.Family("hongbao_requests_total", "counter", "Requests read from clients (well-formed frames), by type, whether served or refused.")
	for _, r := range requestTypes {
		e.Sample(fmt.Sprintf(`hongbao_requests_total{type=%q}`, r.name), ist.Frames.Of(r.t))
	}
	e.Family("hongbao_requests_overloaded_total", "counter", "Requests the ingress answered overloaded at once (SHAKE_RESULT 2, OPEN_RESULT 5, SEND_ACK 2, CHAT_ACK 2), because their SET's ring was full or by delay (hongbao_shed_total is part of it), by type.")
	for _, r := range requestTypes {
		if r.t != proto.Login && r.t != proto.Ping { // never refused
			e.Sample(fmt.Sprintf(`hongbao_requests_overloaded_total{type=%q}`, r.name), ist.Overload.Of(r.t))
		}
	}
	e.Counter("hongbao_stamped_reads_total", "Reads made with the kernel's receive timestamp, to measure how long requests waited: only while some may wait near -shed-delay.", ist.Stamped)
	e.Gauge("hongbao_shake_pool", "Shake envelopes in the pools, waiting for a SHAKE.", int64(st.Shake.Pool))

	e.Counter("hongbao_envelopes_created_total", "Group envelopes created: by users' SENDs and by send campaigns.", st.Envelopes.Created)
	e.Counter("hongbao_shake_returned_total", "Shake envelopes whose SHAKE_RESULT never reached its client, put back in the pool (since the start: /stats shake.got, which a restart keeps, is hongbao_shake_total{result=\"got\"} less these plus what was got before it).", returned)
	e.Counter("hongbao_envelopes_opened_total", "Shares of group envelopes drawn by an OPEN (since the start: /stats envelopes.opened, which a restart keeps, is this plus what was opened before it).", openOK)
	e.Counter("hongbao_open_untold_total", "OPEN_RESULT 0 answers that never reached their opener (its connection went first): the share stays drawn and counted, the opener's, and a repeated OPEN answers 1 with it.", untold)
	e.Counter("hongbao_shake_untold_total", "SHAKE_RESULT 1 answers to a request with a request id that never reached their client (its connection went first): the envelope stays got, the user's, and a retry with the same id is told it.", shakeUntold)
	e.Family("hongbao_request_replays_total", "counter", "Requests with a request id answered again with the money answer kept for that id (a retry), by type: no second draw, no second envelope.")
	e.Family("hongbao_request_ids_expired_total", "counter", "Requests refused (SHAKE_RESULT 3, OPEN_RESULT 6, SEND_ACK 4) because their request id was outside -request-window or named another request, by type.")
	for i, name := range []string{"shake", "open", "send"} {
		e.Sample(fmt.Sprintf(`hongbao_request_replays_total{type=%q}`, name), replays[i])
		e.Sample(fmt.Sprintf(`hongbao_request_ids_expired_total{type=%q}`, name), expired[i])
	}
	e.Gauge("hongbao_request_ids", "Money answers kept for request ids, within -request-window: about 48 bytes each.", kept)
	e.Gauge("hongbao_envelopes_held", "Group envelopes in memory: still openable, or fully opened and kept for -opened-retention.", held)
	e.Gauge("hongbao_envelopes_expiry_queued", "Entries of the group envelopes' expiry queues.", queued)
	e.Gauge("hongbao_envelopes_live", "Group envelopes not fully opened and not expired: what -max-envelopes caps.", int64(st.Envelopes.Live))
	e.Family("hongbao_send_limited_total", "counter", "SENDs answered SEND_ACK 3, by the limit they met: the sender's -send-rate, its -max-live-per-user, its SET's share of -max-envelopes.")
	e.Sample(`hongbao_send_limited_total{reason="rate"}`, st.Envelopes.SendLimitedBy.Rate)
	e.Sample(`hongbao_send_limited_total{reason="live_cap"}`, st.Envelopes.SendLimitedBy.LiveCap)
	e.Sample(`hongbao_send_limited_total{reason="budget"}`, st.Envelopes.SendLimitedBy.Budget)
	e.Counter("hongbao_envelopes_evicted_total", "Fully opened group envelopes forgotten before -opened-retention to stay within -max-envelopes.", st.Envelopes.Evicted)
	e.Gauge("hongbao_pending_pushes", "ENVELOPE pushes kept for recipients who were offline, sent at their next login.", st.Envelopes.Pending.Waiting)
	e.Counter("hongbao_pending_pushes_dropped_total", "ENVELOPE pushes kept for offline recipients and dropped for room (each user keeps its newest).", st.Envelopes.Pending.Dropped)
	if s.Campaigns != nil {
		e.Gauge("hongbao_campaigns_running", "Campaigns dealing now (at most -max-campaigns).", int64(s.Campaigns.Running()))
	}
	e.Counter("hongbao_chat_received_total", "CHATs that reached their recipient's SET.", st.Chat.Received)
	e.Counter("hongbao_chat_limited_total", "CHATs over their sender's -chat-rate, answered CHAT_ACK 3 at once: they reached no SET.", st.Chat.Limited)
	e.Counter("hongbao_chat_dropped_total", "CHATs not delivered because their recipient's unwritten output was at half of -max-pending: answered CHAT_ACK 2 (part of hongbao_chat_received_total).", st.Chat.Dropped)

	e.Counter("hongbao_bytes_in_total", "Bytes read from client connections.", ist.BytesIn)
	e.Counter("hongbao_bytes_out_total", "Bytes written to client connections.", bytesOut)
	e.Counter("hongbao_writes_total", "write system calls to client connections.", writes)
	e.Counter("hongbao_frames_dropped_total", "Answer and push frames not written: their connection was gone or cut off.", dropped)
	e.Counter("hongbao_cut_off_total", "Connections cut off (ERROR 6) for more than -max-pending bytes of unwritten output.", cutOff)
	if t := s.SlowTrace; t != nil {
		e.Counter("hongbao_slow_traces_total", "Runtime traces written for answers slower than -trace-slow.", t.Written())
		e.Counter("hongbao_slow_traces_skipped_total", "Answers slower than -trace-slow within 10 s after a trace was written: not traced.", t.Skipped())
	}

	if s.Bus != nil {
		e.Family("hongbao_ring_occupancy", "gauge", "Events in a SET's ring now: claimed and not yet finished by its last stage.")
		for _, i := range s.Bus.Local() {
			e.Sample(fmt.Sprintf(`hongbao_ring_occupancy{set="%d"}`, i), uint64(s.Bus.Ring(i).Len()))
		}
		e.Family("hongbao_ring_capacity", "gauge", "Slots of a SET's ring (-ring): occupancy can reach it.")
		for _, i := range s.Bus.Local() {
			e.Sample(fmt.Sprintf(`hongbao_ring_capacity{set="%d"}`, i), uint64(s.Bus.Ring(i).Size()))
		}
	}
	writeLatency(e, ls, "hongbao_latency_seconds", "Time from the ingress reading a request (the start of its epoll loop's chunk of up to 64 reads) to the end of the egress write of its answer, by request type; answers the ingress refused as overloaded are not counted.",
		latencyOf)
	writeLatency(e, ls, "hongbao_batch_wait_seconds", "Time from the ingress decoding a request to the egress beginning the batch that answers it (waiting for its SET to run, and the stages before egress), by request type; the part of hongbao_latency_seconds before the write.",
		func(c *ledger.EgressCounters) (*[ledger.RequestTypes][ledger.LatencyBuckets]atomic.Uint64, *[ledger.RequestTypes]atomic.Uint64) {
			return &c.WaitBuckets, &c.WaitSumNs
		})
	writeJournal(e, s)
	writeCluster(e, s)
}

// requestTypes names the request types as the latency histograms' type label does.
var requestTypes = []struct {
	name string
	t    proto.Type
}{{"login", proto.Login}, {"shake", proto.Shake}, {"open", proto.Open}, {"send", proto.Send}, {"chat", proto.Chat}, {"ping", proto.Ping}}

// writeLatency writes the histogram family name, one per request type,
// summed over the SETs' egress buckets that of selects (bucket i: below
// ledger.LatencyBucketUs(i) µs).
func writeLatency(e exposition.Writer, ls []*ledger.Ledger, name, help string,
	of func(*ledger.EgressCounters) (*[ledger.RequestTypes][ledger.LatencyBuckets]atomic.Uint64, *[ledger.RequestTypes]atomic.Uint64)) {
	e.Family(name, "histogram", help)
	for t := range ledger.RequestTypes {
		buckets, sum, count := sumLatency(ls, t, of)
		typ := (event.KLogin + event.Kind(t)).String()
		var cum uint64
		for i := range ledger.LatencyBuckets - 1 {
			cum += buckets[i]
			e.Sample(fmt.Sprintf(`%s_bucket{type=%q,le="%g"}`, name, typ, float64(ledger.LatencyBucketUs(i))/1e6), cum)
		}
		e.Sample(fmt.Sprintf(`%s_bucket{type=%q,le="+Inf"}`, name, typ), count)
		fmt.Fprintf(e.W, "%s_sum{type=%q} %g\n", name, typ, float64(sum)/1e9)
		e.Sample(fmt.Sprintf(`%s_count{type=%q}`, name, typ), count)
	}
}

// sumLatency sums request type t's histogram over the SETs' ledgers: the
// count of each bucket, the latencies' sum in ns and the count in all.
func sumLatency(ls []*ledger.Ledger, t int,
	of func(*ledger.EgressCounters) (*[ledger.RequestTypes][ledger.LatencyBuckets]atomic.Uint64, *[ledger.RequestTypes]atomic.Uint64)) (buckets [ledger.LatencyBuckets]uint64, sum, count uint64) {
	for _, l := range ls {
		bs, sums := of(&l.Egress)
		for i := range buckets {
			n := bs[t][i].Load()
			buckets[i] += n
			count += n
		}
		sum += sums[t].Load()
	}
	return buckets, sum, count
}

// latencyOf is the read-to-write latency of the ledger's answers.
func latencyOf(c *ledger.EgressCounters) (*[ledger.RequestTypes][ledger.LatencyBuckets]atomic.Uint64, *[ledger.RequestTypes]atomic.Uint64) {
	return &c.LatencyBuckets, &c.LatencySumNs
}

// writeJournal writes the journal's families (with -journal on): what the
// writer made durable, how long its syncs take and how far the disk is
// behind the SETs.
func writeJournal(e exposition.Writer, s Sources) {
	j := s.Journal
	if j == nil {
		return
	}
	m := &j.M
	e.Counter("hongbao_journal_records_total", "Journal records written and synced (state changes: envelopes dealt, got, returned; group envelopes created, opened, refunded, forgotten; campaigns).", m.Records.Load())
	e.Counter("hongbao_journal_bytes_total", "Bytes of journal rounds (records and their round headers) written and synced.", m.Bytes.Load())
	e.Counter("hongbao_journal_segments_total", "Journal segment files started.", m.Segments.Load())
	e.Counter("hongbao_journal_checkpoints_total", "Writes of the journal's checkpoint (the last durable position; at most every 10 ms after rounds).", m.Checkpoints.Load())
	e.Family("hongbao_journal_cuts_total", "counter", "Cuts the start made in the journal (each logged): torn, the tail of the last round a crash interrupted; repair, with -journal-repair, what followed damage (a segment or the checkpoint found missing counts too).")
	e.Sample(`hongbao_journal_cuts_total{kind="torn"}`, m.TornCuts.Load())
	e.Sample(`hongbao_journal_cuts_total{kind="repair"}`, m.Repairs.Load())
	e.Counter("hongbao_journal_cut_bytes_total", "Bytes the start cut from the journal (kept beside it unless zeros).", m.CutBytes.Load())
	e.Counter("hongbao_journal_cut_records_total", "Records that decoded in the bytes the start cut from the journal.", m.CutRecords.Load())
	e.Family("hongbao_journal_fsync_seconds", "histogram", "Time of each fdatasync of a journal round: one per round, whatever the SETs appended meanwhile (group commit); money answers wait for it.")
	var cum uint64
	for i := range journal.FsyncBuckets - 1 {
		cum += m.FsyncBuckets[i].Load()
		e.Sample(fmt.Sprintf(`hongbao_journal_fsync_seconds_bucket{le="%g"}`, float64(journal.FsyncBucketUs(i))/1e6), cum)
	}
	count := cum + m.FsyncBuckets[journal.FsyncBuckets-1].Load()
	e.Sample(`hongbao_journal_fsync_seconds_bucket{le="+Inf"}`, count)
	fmt.Fprintf(e.W, "hongbao_journal_fsync_seconds_sum %g\n", float64(m.FsyncNs.Load())/1e9)
	e.Sample("hongbao_journal_fsync_seconds_count", count)
	e.Gauge("hongbao_journal_lag_bytes", "Bytes the SETs have handed to the journal that are not durable yet: what money answers wait on now.", int64(j.Lag()))
	failed := int64(0)
	if j.Failed() {
		failed = 1
	}
	e.Gauge("hongbao_journal_failed", "1 once a journal write or sync failed: no money is handed out (see /healthz), else 0.", failed)
	e.Family("hongbao_recovery_seconds", "gauge", "Time the start took to read the snapshot and replay the journal, before serving.")
	fmt.Fprintf(e.W, "hongbao_recovery_seconds %g\n", s.Recovery.Seconds())
	e.Counter("hongbao_snapshots_total", "Snapshots written (every -snapshot-every and at SIGTERM).", s.Snapshots)
	e.Family("hongbao_snapshot_seconds", "gauge", "Time the last snapshot took: the SETs' state, the wait for their journal marks, the file written and synced.")
	fmt.Fprintf(e.W, "hongbao_snapshot_seconds %g\n", s.SnapshotTime.Seconds())
	e.Gauge("hongbao_snapshot_bytes", "Size of the last snapshot file.", int64(s.SnapshotBytes))
}

// writeCluster writes the cluster's families, on a gateway (-nats) only.
func writeCluster(e exposition.Writer, s Sources) {
	if s.Node == nil {
		return
	}
	m := &s.Node.M
	for _, c := range []struct {
		name, help string
		v          *atomic.Uint64
	}{
		{"events_sent", "Events sent to other gateways (requests, answers and pushes for SETs or connections there), in batches NATS took.", &m.Sent},
		{"events_received", "Events received from other gateways, misrouted ones included.", &m.Received},
		{"messages_sent", "NATS messages sent to other gateways: one per batch of a link.", &m.Messages},
		{"publish_errors", "Batches NATS refused (disconnected past its buffer, or closed): their events were not sent, their crossings time out.", &m.PublishErrors},
		{"crossings_timed_out", "Crossings (OPENs, CHATs to another gateway) not answered within -cluster-timeout: answered OPEN_RESULT 5 or CHAT_ACK 2, an OPEN's draw cancelled at its envelope's gateway.", &m.TimedOut},
		{"answers_late", "Answers to crossings that came after their bound: dropped (the client was told unavailable).", &m.Late},
		{"stale_events", "Events from a SET's former owner (where SETs fail over or move), sent before it learnt it lost the SET: dropped, as the new owner answers its clients. Take-backs excepted: they give back shares no client was told.", &m.Stale},
		{"misrouted", "Events received for a SET this gateway does not run (a cancel: not within 2 s, while the SET moves here): dropped (expected 0).", &m.Misrouted},
		{"malformed", "NATS messages on this gateway's subject that did not decode: the rest of the message dropped (expected 0).", &m.Malformed},
		{"refused", "Requests from other gateways answered overloaded (OPEN_RESULT 5, CHAT_ACK 2): their SET's ring was nearly full.", &m.Refused},
		{"slow_consumer", "Times NATS dropped messages for this gateway because it read them too slowly (expected 0): crossings in them time out.", &m.SlowConsumer},
	} {
		e.Counter("hongbao_cluster_"+c.name+"_total", c.help, c.v.Load())
	}
	e.Family("hongbao_cluster_forged_total", "counter", "NATS messages dropped because they did not come from the gateway they claim to, or claim what their gateway may not send (a user, envelope or crossing of another gateway's; a campaign without the admin token's proof), by kind; the log says the first of each kind and then one line every 10 s. Expected 0: anything else is an attack, or gateways set up differently.")
	for k := range cluster.ForgedKinds {
		e.Sample(`hongbao_cluster_forged_total{kind="`+cluster.ForgedName(k)+`"}`, s.Node.Forged(k))
	}
	e.Counter("hongbao_cluster_stray_answers_total", "Answers to connections here of a SET that had moved to another gateway when they were made: dropped, for the connection went with the SET (an OPEN's share stays its opener's, told by the OPEN sent again).", s.Bus.Strays())
	e.Gauge("hongbao_cluster_crossings_in_flight", "Crossings waiting for their answer from another gateway now.", int64(s.Node.InFlight()))
	// Every gateway tells the cluster's SETs: an alert sums what they run
	// against it, and hongbao_ring_capacity lists only the SETs run here.
	e.Gauge("hongbao_cluster_sets", "SETs of the cluster (-sets), whichever gateways run them: the SETs the gateways run (hongbao_cluster_sets_running, summed over them) should add up to it.", int64(s.Sets))
	e.Gauge("hongbao_cluster_gateways_departed", "Gateways unheard whose last heartbeat said they were leaving (POST /cluster/drain, a SIGTERM handing their SETs over), within the last hour: planned departures, which HongbaoGatewayMissing does not page for.", int64(s.Node.Departed()))
	e.Gauge("hongbao_cluster_gateways_up", "Gateways up: ready (their SETs recovered) and heard from within the last second (heartbeats every 250 ms), this one included.", int64(len(s.Node.Peers())))
	connected := int64(0)
	if s.Node.Connected() {
		connected = 1
	}
	e.Gauge("hongbao_cluster_nats_connected", "1 while the NATS connection is up, else 0: meanwhile crossings are answered unavailable at their bound.", connected)
	if s.Replicated != nil {
		writeReplicated(e, s)
	}
}

// writeReplicated writes the replicated SETs' metrics (-journal jetstream).
func writeReplicated(e exposition.Writer, s Sources) {
	c := s.Replicated.Counters()
	e.Gauge("hongbao_cluster_sets_running", "SETs this gateway claimed, loaded and serves now (-journal jetstream).", int64(c.Running))
	for _, m := range []struct {
		name, help string
		v          uint64
	}{
		{"takeovers", "SETs this gateway claimed and then served: at its start, or taken over from a gateway whose lease lapsed.", c.Takeovers},
		{"claims_lost", "Claims of a SET another gateway made first (its claim, or a message, came after the last this gateway read): that gateway serves it.", c.ClaimsLost},
		{"claims_deferred", "Claims of a SET not made because its owner, unheard for -lease, had appended to its journal within it: alive, its heartbeats late.", c.ClaimsDeferred},
		{"claim_failures", "Claims that did not get to serving: once the SET was claimed and being loaded, this gateway stops (exit status 3).", c.ClaimFailures},
		{"sets_released", "SETs handed back at a graceful stop, so that the others claim them at once.", c.Released},
		{"moves", "SETs this gateway handed to another on purpose (a move: POST /sets/{s}/move, rebalancing, draining), the other serving them.", c.Moves},
		{"move_failures", "Moves out of this gateway that did not end with the other gateway serving the SET.", c.MoveFailures},
		{"standby_takeovers", "Takeovers whose SET was followed here as a standby: read up to the claim instead of loaded from its snapshot and replayed.", c.StandbyTakeovers},
		{"standby_failures", "Standbys that failed to start, to follow (a snapshot purged what they had not read: started again), or to take their SET over (loaded from JetStream instead).", c.StandbyFailures},
	} {
		e.Counter("hongbao_cluster_"+m.name+"_total", m.help, m.v)
	}
	e.Family("hongbao_cluster_takeover_seconds", "gauge", "The last takeover's time from the claim to serving: fencing the old owner, loading the snapshot, replaying the records after it.")
	fmt.Fprintf(e.W, "hongbao_cluster_takeover_seconds %g\n", c.LastTakeover.Seconds())
	e.Family("hongbao_cluster_move_pause_seconds", "gauge", "The last move out of this gateway's pause: from refusing the SET's requests to the other gateway serving it.")
	fmt.Fprintf(e.W, "hongbao_cluster_move_pause_seconds %g\n", c.LastMovePause.Seconds())
	e.Gauge("hongbao_cluster_moves_out", "SETs this gateway is handing to another now.", int64(c.MovesOut))
	e.Gauge("hongbao_cluster_moves_in", "SETs this gateway follows now, to take them over from their owner.", int64(c.MovesIn))
	e.Gauge("hongbao_cluster_standbys", "SETs this gateway follows as a standby now, run by another (-standby): those it would take over should their gateway die.", int64(c.Standbys))
	e.Gauge("hongbao_cluster_leaving", "1 while this gateway hands every SET over before it stops (SIGTERM, POST /cluster/drain).", b2i(c.Leaving))
	e.Gauge("hongbao_cluster_lost", "1 once this gateway lost a SET it ran (another gateway took it over): it stops telling money and exits (status 3).", b2i(c.Lost))
	e.Gauge("hongbao_cluster_fenced", "1 while this gateway is cut off from NATS (its own heartbeat not heard back on its connections): it serves none of its SETs — requests ERROR 9, logins LOGIN_ACK 3 — and claims none, until it can show they are still its own.", b2i(c.Fenced))
	e.Counter("hongbao_cluster_fences_total", "Times this gateway fenced its SETs, cut off from NATS.", c.Fences)
	e.Gauge("hongbao_cluster_stalled", "1 while a journal round has waited for JetStream longer than the lease (no quorum, a stream leader's election): money requests are answered overloaded (retry) at the door meanwhile.", b2i(s.Bus.Stalled()))
	e.Counter("hongbao_cluster_stalls_total", "Times this gateway's journal stalled so.", c.Stalls)
	e.Counter("hongbao_cluster_sent_away_total", "Connections told ERROR 9 at a request while this gateway was fenced: their clients reconnect to another gateway.", s.Ingress.Stats().SentAway)
	e.Family("hongbao_journal_refused_total", "counter", "What this gateway read from JetStream and refused, by kind: unfenced, a message appended without its SET's expected last sequence (no gateway appends so); not_owner, a round of a gateway that did not own the SET; claim, a claim out of turn or a release by a gateway that did not own the SET; snapshot, a snapshot whose writer did not own the SET when it was taken, or that does not decode. Each fences nobody and is never applied. Expected 0: anything else is a gateway's credentials misused.")
	for k, name := range jsjournal.RefusedNames {
		e.Sample(`hongbao_journal_refused_total{kind="`+name+`"}`, c.Refused[k])
	}
}

// b2i is 1 for true, 0 for false: a gauge of a condition.
func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
