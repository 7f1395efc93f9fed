package loadclient

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RateChange is one step of a plan: the total rate is QPS sends a second from the first
// whole second at or after AtNs (Unix ns). Hand it to Schedule.SetRate.
type RateChange struct {
	QPS  uint32
	AtNs int64
}

// ParsePlan parses a scripted plan: comma-separated phases "rate@duration" that run back
// to back from the first whole second at or after startNs, for example
// "30000@60s,60000@1m30s". It returns one change per phase and a final change to 0 when
// the last phase ends; the last phase may omit "@duration" to hold its rate until told
// otherwise ("30000@60s,60000"). Durations are time.ParseDuration strings of whole
// seconds, so every change falls on a whole second; a rate of 0 is a pause. Every process
// of a run must be given the same plan and start.
func ParsePlan(spec string, startNs int64) ([]RateChange, error) {
	if startNs < 0 || startNs > maxAtNs {
		return nil, fmt.Errorf("cannot parse plan %q: start %d is not a Unix time in ns in [0, %d]", spec, startNs, int64(maxAtNs))
	}
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("cannot parse plan %q: no phases; want rate@duration,… such as \"30000@60s,60000@60s\"", spec)
	}
	parts := strings.Split(spec, ",")
	changes := make([]RateChange, 0, len(parts)+1)
	at := (startNs + nsPerSec - 1) / nsPerSec * nsPerSec
	for i, part := range parts {
		qps, d, err := parsePhase(strings.TrimSpace(part), i == len(parts)-1)
		if err != nil {
			return nil, fmt.Errorf("cannot parse plan phase %d %q: %w", i+1, part, err)
		}
		changes = append(changes, RateChange{QPS: qps, AtNs: at})
		if d == 0 {
			return changes, nil // the last phase holds
		}
		if int64(d) > maxAtNs-at {
			return nil, fmt.Errorf("cannot parse plan phase %d %q: ends after the year 2262", i+1, part)
		}
		at += int64(d)
	}
	return append(changes, RateChange{QPS: 0, AtNs: at}), nil
}

// parsePhase parses "rate@duration", or "rate" alone (duration 0) when last.
func parsePhase(phase string, last bool) (qps uint32, d time.Duration, err error) {
	rate, dur, hasDur := strings.Cut(phase, "@")
	if !hasDur && !last {
		return 0, 0, fmt.Errorf("missing \"@duration\"; only the last phase may hold its rate")
	}
	q, err := strconv.ParseUint(rate, 10, 32)
	if err != nil || q > MaxQPS {
		return 0, 0, fmt.Errorf("cannot parse rate %q: want a whole number of sends a second in [0, %d]", rate, MaxQPS)
	}
	if !hasDur {
		return uint32(q), 0, nil
	}
	d, err = time.ParseDuration(dur)
	if err != nil {
		return 0, 0, fmt.Errorf("cannot parse duration %q: %w", dur, err)
	}
	if d <= 0 || d%time.Second != 0 {
		return 0, 0, fmt.Errorf("duration %q: want a positive whole number of seconds, so that rate changes fall on whole seconds", dur)
	}
	return uint32(q), d, nil
}
