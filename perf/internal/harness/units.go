package harness

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Millis is d in milliseconds, to the microsecond: the unit of the
// reports' JSON.
func Millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Ms formats ns as milliseconds with two decimals.
func Ms(ns int64) string { return fmt.Sprintf("%.2f ms", float64(ns)/1e6) }

// MiB formats bytes as MiB with one decimal.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// GiB formats bytes as GiB with two decimals.
func GiB(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

// Per formats bytes per item, "-" for no items.
func Per(b int64, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f B", float64(b)/float64(n))
}

// Thousands writes n with comma separators.
func Thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
