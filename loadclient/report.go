package loadclient

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a run measured, as written to -report. Latencies count from each request's
// scheduled send time, not from when it went out, so a stalled client or server cannot hide
// the stall (coordinated omission); OPENs, which answer pushes, count from when they were sent.
type Report struct {
	Start             time.Time                 `json:"start"`
	Seconds           float64                   `json:"duration_s"`
	Users             int64                     `json:"users"`
	Procs             int                       `json:"procs"`
	ConnectionsMax    int64                     `json:"connections_max"` // the most logged in at a tick
	Connects          uint64                    `json:"connects"`        // successful TCP connects
	Churned           uint64                    `json:"churned"`         // connections closed on purpose (-churn) to reconnect
	Redirected        uint64                    `json:"redirected"`      // LOGIN_ACK 3 followed to the gateway it named
	Outages           uint64                    `json:"outages"`         // logged-in connections that failed (reset, closed, ERROR 8 or 9, timeout; not churned)
	Moved             uint64                    `json:"moved"`           // of the outages, ERROR 9: the gateway no longer served the user's SET
	NoOwner           uint64                    `json:"no_owner"`        // LOGIN_ACK 3 naming no gateway (the SET between owners): retried
	Reconnects        uint64                    `json:"reconnects"`      // logins again after an outage; outages − reconnects were not back by the end
	OutageMaxS        float64                   `json:"outage_max_s"`    // the longest a user was without a connection, failure to login (or to the end of the sends)
	Requests          map[string]*RequestReport `json:"requests"`        // by kind: LOGIN, SHAKE, OPEN, SEND, CHAT
	Pushes            map[string]uint64         `json:"pushes"`          // ENVELOPE, CHAT_DELIVER
	Unopened          uint64                    `json:"pushes_unopened"` // ENVELOPE pushes after the client stopped opening at the end: no money
	Repeated          uint64                    `json:"pushes_repeated"` // ENVELOPE pushes of an envelope whose open was under way: not opened again
	DeliverLatency    LatencyReport             `json:"chat_deliver_latency"`
	ShakeAmount       uint64                    `json:"shake_amount"` // Σ SHAKE_RESULT status 1 amounts, fen
	OpenAmount        uint64                    `json:"open_amount"`  // Σ OPEN_RESULT status 0 amounts and open_learned_amount, fen: the OPEN money told
	OpenResent        uint64                    `json:"open_resent"`  // OPENs sent again (in requests.OPEN.sent): answered 5, or in flight when their connection ended
	OpenLearned       uint64                    `json:"open_learned"` // shares learned by a repeated OPEN: a re-sent OPEN answered 1
	OpenLearnedAmount uint64                    `json:"open_learned_amount"`
	OpenUnresolved    int64                     `json:"open_unresolved"`  // opens without a final answer when the run closed: each may hold a share drawn, never told
	ShakeResent       uint64                    `json:"shake_resent"`     // SHAKEs sent again with their request id (in requests.SHAKE.sent): in flight when their connection ended
	ShakeUnresolved   uint64                    `json:"shake_unresolved"` // SHAKEs in flight when their connection ended and never sent again: each may hold an envelope got, never told
	Skipped           uint64                    `json:"skipped_not_connected"`
	Backlog           uint64                    `json:"dropped_backlog"`
	Errors            map[string]uint64         `json:"errors"`           // connect, reset, timeout, protocol, overload
	ConnectFailures   ConnectFailuresReport     `json:"connect_failures"` // why connects and logins failed
	Memory            *MemoryReport             `json:"memory,omitempty"`
	Reconcile         *ReconcileReport          `json:"reconcile,omitempty"`
}

// RequestReport is one kind of request.
type RequestReport struct {
	Sent       uint64            `json:"sent"`
	Answered   uint64            `json:"answered"`
	Lost       uint64            `json:"lost"`       // in flight on a connection that dropped
	NotDone    uint64            `json:"not_done"`   // in flight at ERROR 9 (moved): not carried out (an OPEN counts as lost: sent again)
	Unanswered uint64            `json:"unanswered"` // still in flight at the end
	Status     map[string]uint64 `json:"status"`     // answers by status code
	Latency    LatencyReport     `json:"latency"`
}

// LatencyReport holds latency percentiles in ns.
type LatencyReport struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_ns"`
	P50   int64   `json:"p50_ns"`
	P90   int64   `json:"p90_ns"`
	P99   int64   `json:"p99_ns"`
	P999  int64   `json:"p99_9_ns"`
	Max   int64   `json:"max_ns"`
	// Buckets are every latency recorded, to merge with other reports' (MergeLatency).
	Buckets *LatencyBuckets `json:"buckets,omitempty"`
}

// MemoryReport is the client's memory with every connection up, after a collection: the
// heap and the goroutine stacks, per user of the process (of all children for -procs).
type MemoryReport struct {
	HeapInuse  uint64  `json:"heap_inuse"`
	StackInuse uint64  `json:"stack_inuse"`
	Users      int64   `json:"users"`
	PerUser    float64 `json:"bytes_per_user"`
}

func latencyOf(h *LatencyHistogram) LatencyReport {
	return LatencyReport{
		Count: h.Count(), Mean: h.Mean(),
		P50: h.Quantile(0.5), P90: h.Quantile(0.9), P99: h.Quantile(0.99), P999: h.Quantile(0.999),
		Max: h.Max(), Buckets: bucketsOf(h),
	}
}

// bucketsOf is h's buckets for a report, nil for an empty histogram.
func bucketsOf(h *LatencyHistogram) *LatencyBuckets {
	if h.Count() == 0 {
		return nil
	}
	w := wireOf(h)
	return &w
}

func buildReport(cfg *Config, rep *reporter, res *loadResult, rec *ReconcileReport, mem *MemoryReport) *Report {
	c := &res.counters
	r := &Report{
		Start:             time.Unix(0, rep.startNs),
		Seconds:           cfg.Duration.Seconds(),
		Users:             c.Users,
		Procs:             cfg.Procs,
		ConnectionsMax:    rep.maxUp,
		Connects:          c.Connects,
		Churned:           c.Churned,
		Redirected:        c.Redirected,
		Outages:           c.Outages,
		Moved:             c.Moved,
		NoOwner:           c.NoOwner,
		Reconnects:        c.Reconnects,
		OutageMaxS:        float64(c.OutageMaxNs) / float64(time.Second),
		Requests:          map[string]*RequestReport{},
		Pushes:            map[string]uint64{},
		Unopened:          c.Unopened,
		Repeated:          c.Repeated,
		DeliverLatency:    latencyOf(res.hists[histDeliver]),
		ShakeAmount:       c.ShakeAmount,
		OpenAmount:        c.OpenAmount,
		OpenResent:        c.Resent,
		OpenLearned:       c.Learned,
		OpenLearnedAmount: c.LearnedAmount,
		OpenUnresolved:    c.OpenPending,
		ShakeResent:       c.ShakeResent,
		ShakeUnresolved:   c.ShakeUnresolved + uint64(max(c.ShakePending, 0)),
		Skipped:           c.Skipped,
		Backlog:           c.Backlog,
		Errors:            map[string]uint64{},
		ConnectFailures:   c.ConnectFailures.reportOf(rep.startNs),
		Memory:            mem,
		Reconcile:         rec,
	}
	for k := range nReq {
		rr := &RequestReport{
			Sent: c.Sent[k], Answered: c.answered(k), Lost: c.Lost[k], NotDone: c.NotDone[k], Unanswered: c.Unanswered[k],
			Status: map[string]uint64{}, Latency: latencyOf(res.hists[k]),
		}
		for s, n := range c.Status[k] {
			if n > 0 {
				rr.Status[strconv.Itoa(s)] = n
			}
		}
		r.Requests[reqNames[k]] = rr
	}
	for p := range nPush {
		r.Pushes[pushNames[p]] = c.Pushes[p]
	}
	for e := range nErr {
		r.Errors[errNames[e]] = c.Errors[e]
	}
	return r
}

// WriteJSON writes r, indented, to the file at path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("-report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("-report: %w", err)
	}
	return nil
}

// WriteSummary prints r as a table.
func (r *Report) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "\n%d users (%d processes), %.0fs from %s, %d connects (%d churned, %d redirected), at most %d up\n",
		r.Users, r.Procs, r.Seconds, r.Start.Format(time.TimeOnly), r.Connects, r.Churned, r.Redirected, r.ConnectionsMax)
	if r.Outages > 0 || r.Moved > 0 {
		fmt.Fprintf(w, "reconnects: %d of %d connections that failed (%d moved: ERROR 9), %d not back by the end; the longest a user was without a connection %.3f s\n",
			r.Reconnects, r.Outages, r.Moved, r.Outages-min(r.Reconnects, r.Outages), r.OutageMaxS)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "request\tsent\tanswered\tlost\tmoved\tunanswered\tstatus\tp50\tp90\tp99\tp99.9\tmax\t")
	for k := range nReq {
		rr := r.Requests[reqNames[k]]
		if rr.Sent == 0 && rr.Answered == 0 {
			continue
		}
		var st []string
		for s := range maxStatus {
			if n := rr.Status[strconv.Itoa(s)]; n > 0 {
				st = append(st, fmt.Sprintf("%d:%d", s, n))
			}
		}
		l := rr.Latency
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", reqNames[k], rr.Sent, rr.Answered, rr.Lost, rr.NotDone, rr.Unanswered,
			strings.Join(st, " "), ms(l.P50), ms(l.P90), ms(l.P99), ms(l.P999), ms(l.Max))
	}
	tw.Flush()
	var unopened []string
	if r.Unopened > 0 {
		unopened = append(unopened, fmt.Sprintf("%d after the client stopped opening at the end", r.Unopened))
	}
	if r.Repeated > 0 {
		unopened = append(unopened, fmt.Sprintf("%d of an envelope whose open was under way", r.Repeated))
	}
	pushes := ""
	if len(unopened) > 0 {
		pushes = " (not opened: " + strings.Join(unopened, ", ") + ")"
	}
	fmt.Fprintf(w, "pushes: ENVELOPE %d%s, CHAT_DELIVER %d\n", r.Pushes["ENVELOPE"], pushes, r.Pushes["CHAT_DELIVER"])
	if r.ShakeResent > 0 || r.ShakeUnresolved > 0 {
		fmt.Fprintf(w, "SHAKE sent again with its request id %d times (in flight when the connection ended); %d never sent again\n", r.ShakeResent, r.ShakeUnresolved)
	}
	if r.OpenResent > 0 || r.OpenUnresolved > 0 {
		fmt.Fprintf(w, "OPEN sent again %d times (answered 5, or in flight when the connection ended): %d shares learned by a repeated OPEN, %d fen; %d opens without a final answer at the end\n",
			r.OpenResent, r.OpenLearned, r.OpenLearnedAmount, r.OpenUnresolved)
	}
	learned := ""
	if r.OpenLearned > 0 {
		learned = fmt.Sprintf(" (%d fen of it learned by a repeated OPEN)", r.OpenLearnedAmount)
	}
	fmt.Fprintf(w, "money: SHAKE got %d fen, OPEN got %d fen%s\n", r.ShakeAmount, r.OpenAmount, learned)
	fmt.Fprintf(w, "errors: connect %d, reset %d, timeout %d, protocol %d, overload %d; skipped (not connected) %d, dropped (backlog) %d\n",
		r.Errors["connect"], r.Errors["reset"], r.Errors["timeout"], r.Errors["protocol"], r.Errors["overload"], r.Skipped, r.Backlog)
	r.ConnectFailures.writeSummary(w)
	if m := r.Memory; m != nil {
		fmt.Fprintf(w, "memory: heap %.1f MiB + stacks %.1f MiB for %d users: %.0f B/user\n",
			float64(m.HeapInuse)/(1<<20), float64(m.StackInuse)/(1<<20), m.Users, m.PerUser)
	}
	if r.Reconcile != nil {
		fmt.Fprintln(w, r.Reconcile.Summary())
	}
}
