package runlog

import (
	"strings"
	"testing"
	"time"
)

const timelineCSV = `t_s,up,connecting,target_qps,sent_qps,answered_qps,envelopes_got_per_s,opened_per_s,pushes_per_s,p50_ms,p99_ms,p99_9_ms,err_connect,err_reset,err_timeout,err_protocol,err_overload,skipped
0.000,1000,0,1000,1.8,0.0,0.0,296.8,296.8,0.000,0.000,0.000,0,0,0,0,0,0
1.001,1000,0,1000,998.9,998.9,223.7,599.3,599.3,0.217,4.170,5.000,0,0,0,0,0,0
2.000,1000,0,2000,1000.9,1000.9,200.2,600.5,600.5,0.214,4.604,6.125,1,0,2,0,3,4
3.020,1000,0,2000,1999.9,1999.9,198.0,600.0,600.0,0.220,4.473,5.500,0,0,0,0,0,0
`

func TestParseTimeline(t *testing.T) {
	rows, err := ParseTimeline(strings.NewReader(timelineCSV))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("got %d rows; want 4", len(rows))
	}
	want := Second{T: 2, Up: 1000, Target: 2000, Sent: 1000.9, Answered: 1000.9, Got: 200.2, Opened: 600.5, Pushes: 600.5,
		P50: 214 * time.Microsecond, P99: 4604 * time.Microsecond, P999: 6125 * time.Microsecond, Errors: 6, Overload: 3, Skipped: 4}
	if rows[2] != want {
		t.Fatalf("row 3\ngot  %+v\nwant %+v", rows[2], want)
	}
}

// A column the parser does not know is ignored; its order does not matter.
func TestParseTimelineColumns(t *testing.T) {
	in := "extra,p99_ms,p50_ms,p99_9_ms,t_s,up,connecting,target_qps,sent_qps,answered_qps,envelopes_got_per_s,opened_per_s,pushes_per_s,skipped\n" +
		"x,2.5,1.5,9.25,7.000,10,2,100,99,98,1,2,3,0\n"
	rows, err := ParseTimeline(strings.NewReader(in))
	if err != nil || len(rows) != 1 {
		t.Fatalf("got %d rows, err %v; want 1 row", len(rows), err)
	}
	if r := rows[0]; r.T != 7 || r.P50 != 1500*time.Microsecond || r.P99 != 2500*time.Microsecond || r.P999 != 9250*time.Microsecond || r.Connecting != 2 {
		t.Fatalf("got %+v; want T 7, p50 1.5ms, p99 2.5ms, p99.9 9.25ms, connecting 2", r)
	}
}

func TestParseTimelineErrors(t *testing.T) {
	f := func(in, wantErr string) {
		t.Helper()
		_, err := ParseTimeline(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("ParseTimeline(%q): err %v; want one containing %q", in, err, wantErr)
		}
	}
	f("", "header")
	f("t_s,up\n1,2\n", "no column connecting")
	f(strings.Replace(timelineCSV, "998.9,998.9", "998.9,x", 1), `line 3: cannot parse answered_qps="x"`)
}

func TestWindowMedian(t *testing.T) {
	rows, err := ParseTimeline(strings.NewReader(timelineCSV))
	if err != nil {
		t.Fatal(err)
	}
	// Seconds (1, 2] and (2, 3]: the rows at 2.000 and 3.020.
	w := Window(rows, 1, 3)
	if len(w) != 2 || w[0].T != 2 || w[1].T != 3.02 {
		t.Fatalf("Window(1, 3) = %+v; want the rows at 2.000 and 3.020", w)
	}
	if m := Median(w, func(s *Second) float64 { return s.Answered }); m != 1500.4 {
		t.Fatalf("Median answered = %v; want 1500.4", m)
	}
	if m := Median(rows[:3], func(s *Second) float64 { return s.Sent }); m != 998.9 {
		t.Fatalf("Median sent = %v; want 998.9", m)
	}
	if m := Median(nil, func(s *Second) float64 { return s.Sent }); m != 0 {
		t.Fatalf("Median of nothing = %v; want 0", m)
	}
}
