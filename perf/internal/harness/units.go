package harness

import (
	"fmt"
	"strconv"
	"time"
)

// The units of the reports, defined here only.

// Millis is d in milliseconds, to the microsecond: the unit of the
// reports' JSON.
func Millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Ms formats ns as milliseconds with two decimals.
func Ms(ns int64) string { return fmt.Sprintf("%.2f ms", float64(ns)/1e6) }

// InMiB is b bytes in MiB, for a chart's or a CSV's column.
func InMiB[T int64 | float64](b T) float64 { return float64(b) / (1 << 20) }

// MiB formats bytes as MiB with one decimal, GiB as GiB with two.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", InMiB(b)) }
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
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
