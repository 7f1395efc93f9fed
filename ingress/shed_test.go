package ingress

import (
	"strings"
	"testing"
)

// TestShedder runs the control law on a fake clock: target 10, interval 20.
// Each round is written "samples@end": the reads' waits, then the time the
// round ended; a sample marked ! must be refused, every other one served.
func TestShedder(t *testing.T) {
	type round struct {
		samples  []int64
		refuse   []bool
		end      int64
		shedding bool // after the round
		busy     bool // after the round
	}
	// parse reads "5 12! @100 +" : samples, the end, and + for shedding
	// after it (* for busy but not shedding, nothing for idle).
	parse := func(t *testing.T, s string) round {
		var r round
		for _, f := range strings.Fields(s) {
			switch {
			case f == "+":
				r.shedding, r.busy = true, true
			case f == "*":
				r.busy = true
			case f[0] == '@':
				r.end = atoi(t, f[1:])
			default:
				r.refuse = append(r.refuse, strings.HasSuffix(f, "!"))
				r.samples = append(r.samples, atoi(t, strings.TrimSuffix(f, "!")))
			}
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		rounds []string
	}{
		{"within the target nothing is refused", []string{
			"1 10 3 @100", "10 @110", "@200", "9 9 9 @300",
		}},
		{"a burst shorter than the interval is served", []string{
			"50 @100 *", "40 30 @110 *", "11 @119 *", "5 @120", "50 @140 *",
		}},
		{"a standing queue arms after an interval, then refuses what waited longer", []string{
			"11 @100 *", "15 @110 *", "12 @119 *", "30 @120 +",
			"30! 2 11! @130 +", // armed: what waited over 10 is refused, the rest served
			"10 @140 +",        // a round under target starts the way back
			"12! @141 +",       // over again: the way back is broken
		}},
		{"the largest sample of a round counts: one fresh read does not break the run", []string{
			"1 50 @100 *", "50 0 0 @110 *", "0 0 12 @125 +",
		}},
		{"a round without samples is under: an idle loop has no queue", []string{
			"50 @100 *", "@110", "50 @120 *", "50 @139 *", "50 @140 +",
		}},
		{"disarms after an interval of rounds under target", []string{
			"50 @100 *", "50 @120 +", "1 @130 +", "50! @131 +",
			"5 @140 +", "5 @150 +", "@159 +", "9 @160", "50 @161 *", // idle again: 50 is served
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newShedder(10)
			for i, line := range tc.rounds {
				r := parse(t, line)
				for j, d := range r.samples {
					if got := s.sample(d); got != r.refuse[j] {
						t.Errorf("round %d %q: sample %d refused = %v; want %v", i, line, d, got, r.refuse[j])
					}
				}
				s.endRound(r.end)
				if s.shedding != r.shedding || s.busy() != r.busy {
					t.Errorf("round %d %q: after it shedding %v busy %v; want %v %v", i, line, s.shedding, s.busy(), r.shedding, r.busy)
				}
			}
		})
	}
}

func atoi(t *testing.T, s string) int64 {
	var n int64
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("bad number %q", s)
		}
		n = 10*n + int64(c-'0')
	}
	return n
}
