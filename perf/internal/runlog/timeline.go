package runlog

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Second is one row of the load client's -timeline CSV: the second of the
// run that ends at T, rates per second over it.
type Second struct {
	T          float64 // seconds since the run's start
	Up         int64   // logged-in connections
	Connecting int64
	Target     float64 // SHAKEs a second the plan asked for
	Sent       float64 // SHAKEs sent a second
	Answered   float64 // SHAKEs answered a second
	Got        float64 // SHAKEs that got an envelope a second
	Opened     float64 // OPENs answered ok a second
	Pushes     float64 // ENVELOPE pushes a second
	P50, P99   time.Duration
	P999       time.Duration
	Errors     int64 // every err_* column added up
	Overload   int64 // of them, err_overload: answers "overloaded", which say "retry"
	Skipped    int64
}

// timelineColumns are the columns ParseTimeline needs; others are ignored, so
// a client that adds a column does not break it.
var timelineColumns = []string{"t_s", "up", "connecting", "target_qps", "sent_qps", "answered_qps",
	"envelopes_got_per_s", "opened_per_s", "pushes_per_s", "p50_ms", "p99_ms", "p99_9_ms", "skipped"}

// ParseTimeline reads the CSV that loadclient -timeline writes, by column
// name.
func ParseTimeline(r io.Reader) ([]Second, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("timeline: cannot read the header: %w", err)
	}
	head = slices.Clone(head) // ReuseRecord: the next Read overwrites it
	col := map[string]int{}
	var errCols []int
	for i, name := range head {
		col[name] = i
		if strings.HasPrefix(name, "err_") {
			errCols = append(errCols, i)
		}
	}
	var missing []string
	for _, name := range timelineColumns {
		if _, ok := col[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("timeline: no column %s in header %q", strings.Join(missing, ", "), strings.Join(head, ","))
	}
	var rows []Second
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return rows, fmt.Errorf("timeline: %w", err)
		}
		var bad error
		num := func(name string) float64 {
			v, err := strconv.ParseFloat(rec[col[name]], 64)
			if err != nil && bad == nil {
				bad = fmt.Errorf("timeline line %d: cannot parse %s=%q", line, name, rec[col[name]])
			}
			return v
		}
		ms := func(name string) time.Duration { return time.Duration(math.Round(num(name) * 1e6)) }
		s := Second{
			T: num("t_s"), Up: int64(num("up")), Connecting: int64(num("connecting")),
			Target: num("target_qps"), Sent: num("sent_qps"), Answered: num("answered_qps"),
			Got: num("envelopes_got_per_s"), Opened: num("opened_per_s"), Pushes: num("pushes_per_s"),
			P50: ms("p50_ms"), P99: ms("p99_ms"), P999: ms("p99_9_ms"), Skipped: int64(num("skipped")),
		}
		if i, ok := col["err_overload"]; ok {
			s.Overload = int64(num(head[i]))
		}
		for _, i := range errCols {
			s.Errors += int64(num(head[i]))
		}
		if bad != nil {
			return rows, bad
		}
		rows = append(rows, s)
	}
}

// Window returns the rows of the seconds that lie within [from, to) seconds
// of the run: a row at T covers (T−1, T], so it is in when from < T ≤ to,
// give or take the client's tick lag.
func Window(rows []Second, from, to float64) []Second {
	const lag = 0.25 // a tick comes tens of ms after its second
	var out []Second
	for _, r := range rows {
		if r.T > from+lag && r.T <= to+lag {
			out = append(out, r)
		}
	}
	return out
}

// Median returns the median of f over rows (0 for none).
func Median(rows []Second, f func(*Second) float64) float64 {
	if len(rows) == 0 {
		return 0
	}
	v := make([]float64, len(rows))
	for i := range rows {
		v[i] = f(&rows[i])
	}
	return MedianOf(v)
}

// MedianOf returns the median of v (0 for none), sorting v.
func MedianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}
