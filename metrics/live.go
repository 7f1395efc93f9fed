package metrics

import (
	"time"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ledger"
)

// Live is a server's figures as the live console reads them once a second
// (GET /console/data): the ones /metrics has, as one JSON object, counters
// cumulative — the console takes each second's difference — and the
// latency histograms per bucket, so that it can tell each second's
// quantiles, as Prometheus's histogram_quantile over a rate does.
type Live struct {
	Time time.Time    `json:"time"`
	Sets int          `json:"sets"` // the cluster's SETs (-sets)
	Run  []int        `json:"run"`  // the SETs run here
	Stat ledger.Stats `json:"stats"`
	// Answered is the answers written, by request type.
	Answered map[string]uint64 `json:"answered"`
	// LatencyBoundsUs are the latency buckets' upper bounds, µs, all but
	// the last (unbounded); Latency is each type's count per bucket,
	// from a request's read to its answer's write.
	LatencyBoundsUs []uint64            `json:"latency_bounds_us"`
	Latency         map[string][]uint64 `json:"latency"`
	// Rings is each SET run here's ring: events in it and its slots.
	Rings []RingFill `json:"rings"`
	// Journal is nil without one.
	Journal *LiveJournal `json:"journal,omitempty"`
	// Campaigns is how many campaigns are running here.
	Campaigns int `json:"campaigns"`
}

// RingFill is a SET's ring at the moment.
type RingFill struct {
	Set  int `json:"set"`
	Len  int `json:"len"`
	Size int `json:"size"`
}

// LiveJournal is the journal's figures.
type LiveJournal struct {
	Records  uint64 `json:"records"`   // written and synced, cumulative
	Bytes    uint64 `json:"bytes"`     // likewise
	Syncs    uint64 `json:"syncs"`     // fdatasyncs (one a round), cumulative
	SyncNs   uint64 `json:"sync_ns"`   // their time, cumulative
	LagBytes uint64 `json:"lag_bytes"` // handed to it and not durable yet
	Failed   bool   `json:"failed"`
}

// LiveOf reads s's figures for the console.
func LiveOf(s Sources, now time.Time) Live {
	l := Live{Time: now, Sets: s.Sets, Stat: s.Stats, Answered: map[string]uint64{}, Latency: map[string][]uint64{}}
	for i := range ledger.LatencyBuckets - 1 {
		l.LatencyBoundsUs = append(l.LatencyBoundsUs, ledger.LatencyBucketUs(i))
	}
	for t := range ledger.RequestTypes {
		typ := (event.KLogin + event.Kind(t)).String()
		buckets, _, n := sumLatency(s.Ledgers, t, latencyOf)
		l.Answered[typ], l.Latency[typ] = n, buckets[:]
	}
	if s.Bus != nil {
		l.Run = s.Bus.Local()
		for _, set := range l.Run {
			r := s.Bus.Ring(set)
			l.Rings = append(l.Rings, RingFill{Set: set, Len: int(r.Len()), Size: int(r.Size())})
		}
	}
	if j := s.Journal; j != nil {
		m := &j.M
		lj := &LiveJournal{Records: m.Records.Load(), Bytes: m.Bytes.Load(), SyncNs: m.FsyncNs.Load(), LagBytes: uint64(j.Lag()), Failed: j.Failed()}
		for i := range m.FsyncBuckets {
			lj.Syncs += m.FsyncBuckets[i].Load()
		}
		l.Journal = lj
	}
	if s.Campaigns != nil {
		l.Campaigns = s.Campaigns.Running()
	}
	return l
}
