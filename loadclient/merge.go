package loadclient

import "fmt"

// MergeReports sums the reports of several load-client processes (or machines) that ran
// one load together into one: users, connections, requests, pushes, money and errors
// added up, and every latency merged from its buckets, so its quantiles are those of all
// the requests (a median of the processes' p99s is not a p99). Its start is the earliest,
// its duration the longest. What belongs to one process alone — memory, the reconciliation
// with a server, connect failures — is left out.
func MergeReports(rs []*Report) (*Report, error) {
	if len(rs) == 0 {
		return nil, fmt.Errorf("no report to merge")
	}
	out := &Report{Requests: map[string]*RequestReport{}, Pushes: map[string]uint64{}, Errors: map[string]uint64{}}
	lat := map[string][]LatencyReport{}
	var deliver []LatencyReport
	for i, r := range rs {
		if i == 0 || r.Start.Before(out.Start) {
			out.Start = r.Start
		}
		out.Seconds = max(out.Seconds, r.Seconds)
		out.Users += r.Users
		out.Procs += max(r.Procs, 1)
		out.ConnectionsMax += r.ConnectionsMax
		out.Connects += r.Connects
		out.Churned += r.Churned
		out.Redirected += r.Redirected
		out.Outages += r.Outages
		out.Moved += r.Moved
		out.NoOwner += r.NoOwner
		out.Reconnects += r.Reconnects
		out.OutageMaxS = max(out.OutageMaxS, r.OutageMaxS)
		out.Unopened += r.Unopened
		out.Repeated += r.Repeated
		out.ShakeAmount += r.ShakeAmount
		out.OpenAmount += r.OpenAmount
		out.OpenResent += r.OpenResent
		out.OpenLearned += r.OpenLearned
		out.OpenLearnedAmount += r.OpenLearnedAmount
		out.OpenUnresolved += r.OpenUnresolved
		out.ShakeResent += r.ShakeResent
		out.ShakeUnresolved += r.ShakeUnresolved
		out.Skipped += r.Skipped
		out.Backlog += r.Backlog
		for k, n := range r.Pushes {
			out.Pushes[k] += n
		}
		for k, n := range r.Errors {
			out.Errors[k] += n
		}
		deliver = append(deliver, r.DeliverLatency)
		for name, rr := range r.Requests {
			m := out.Requests[name]
			if m == nil {
				m = &RequestReport{Status: map[string]uint64{}}
				out.Requests[name] = m
			}
			m.Sent += rr.Sent
			m.Answered += rr.Answered
			m.Lost += rr.Lost
			m.NotDone += rr.NotDone
			m.Unanswered += rr.Unanswered
			for s, n := range rr.Status {
				m.Status[s] += n
			}
			lat[name] = append(lat[name], rr.Latency)
		}
	}
	var err error
	for name, ls := range lat {
		if out.Requests[name].Latency, err = MergeLatency(ls); err != nil {
			return nil, fmt.Errorf("%s latency: %w", name, err)
		}
	}
	if out.DeliverLatency, err = MergeLatency(deliver); err != nil {
		return nil, fmt.Errorf("CHAT_DELIVER latency: %w", err)
	}
	for _, name := range reqNames[:nReq] {
		if out.Requests[name] == nil {
			out.Requests[name] = &RequestReport{Status: map[string]uint64{}}
		}
	}
	return out, nil
}
