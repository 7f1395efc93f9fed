package loadclient

import (
	"slices"
	"strings"
	"testing"
)

func TestParsePlan(t *testing.T) {
	f := func(spec string, startNs int64, want []RateChange) {
		t.Helper()
		got, err := ParsePlan(spec, startNs)
		if err != nil {
			t.Fatalf("ParsePlan(%q): %v", spec, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("ParsePlan(%q) = %v; want %v", spec, got, want)
		}
	}
	s := int64(nsPerSec)
	f("30000@60s,60000@60s", start, []RateChange{{30000, start}, {60000, start + 60*s}, {0, start + 120*s}})
	f(" 100@1m30s , 0@10s,5 ", start, []RateChange{{100, start}, {0, start + 90*s}, {5, start + 100*s}})
	f("7", start, []RateChange{{7, start}})
	f("1000000000@1h", start, []RateChange{{MaxQPS, start}, {0, start + 3600*s}})
	// A start inside a second rounds up to the next whole second.
	f("10@2s", start+1, []RateChange{{10, start + s}, {0, start + 3*s}})
}

func TestParsePlanErrors(t *testing.T) {
	f := func(spec string, startNs int64, want string) {
		t.Helper()
		_, err := ParsePlan(spec, startNs)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("ParsePlan(%q) error %v; want one containing %q", spec, err, want)
		}
	}
	f("", start, `cannot parse plan "": no phases`)
	f(" ", start, `no phases`)
	f("x@1s", start, `cannot parse plan phase 1 "x@1s": cannot parse rate "x"`)
	f("10@1s,-5@1s", start, `phase 2 "-5@1s": cannot parse rate "-5"`)
	f("1000000001@1s", start, `cannot parse rate "1000000001": want a whole number of sends a second in [0, 1000000000]`)
	f("10@1s,,20@1s", start, `phase 2 "": missing "@duration"`)
	f("10,20@1s", start, `phase 1 "10": missing "@duration"; only the last phase may hold its rate`)
	f("10@", start, `phase 1 "10@": cannot parse duration ""`)
	f("10@1x", start, `cannot parse duration "1x"`)
	f("10@1s@2s", start, `cannot parse duration "1s@2s"`)
	f("10@1500ms", start, `duration "1500ms": want a positive whole number of seconds`)
	f("10@0s", start, `duration "0s": want a positive whole number of seconds`)
	f("10@-1s", start, `duration "-1s"`)
	f("10@1s,20@2562047h", start, `phase 2 "20@2562047h": ends after the year 2262`)
	f("10@1s", -1, `start -1 is not a Unix time`)
}

func TestPlanDrivesSchedule(t *testing.T) {
	plan, err := ParsePlan("300@2s,0@1s,500@2s", start)
	if err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, 1000, 1, 1000)
	for _, c := range plan {
		d.setRate(c.QPS, c.AtNs)
	}
	sends := d.until(start + 100*nsPerSec)
	checkPerSecond(t, sends, []int{300, 300, 0, 500, 500, 0, 0})
	if _, _, ok := d.s.Next(); ok {
		t.Fatalf("Next reports a send after the plan ended")
	}
}

func TestPlanOverriddenBySetRate(t *testing.T) {
	plan, err := ParsePlan("300@2s,700@2s", start)
	if err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, 1000, 1, 1000)
	for _, c := range plan {
		d.setRate(c.QPS, c.AtNs)
	}
	sends := d.until(start + 500_000_000)
	d.setRate(500, start+500_000_000) // from start+1s on, the rest of the plan dropped
	sends = append(sends, d.until(start+5*nsPerSec)...)
	checkPerSecond(t, sends, []int{300, 500, 500, 500, 500})
}
