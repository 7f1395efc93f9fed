package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

func TestSegments(t *testing.T) {
	xy := plotter.XYs{{X: 0}, {X: 1}, {X: 2}, {X: 5}, {X: 6}, {X: 9}}
	segs := segments(xy)
	if len(segs) != 3 || len(segs[0]) != 3 || len(segs[1]) != 2 || len(segs[2]) != 1 {
		t.Fatalf("segments = %v; want [0 1 2] [5 6] [9]", segs)
	}
	if segs := segments(nil); len(segs) != 0 {
		t.Fatalf("segments(nil) = %v; want none", segs)
	}
}

// The time axis is labelled on whole seconds, a round step apart.
func TestSecondTicks(t *testing.T) {
	f := func(lo, hi float64, want []string) {
		t.Helper()
		var labels []string
		for _, tk := range (secondTicks{}).Ticks(lo, hi) {
			if tk.Value != math.Trunc(tk.Value) {
				t.Fatalf("Ticks(%v, %v): tick at %v, not a whole second", lo, hi, tk.Value)
			}
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if !slices.Equal(labels, want) {
			t.Fatalf("Ticks(%v, %v) labels %q; want %q", lo, hi, labels, want)
		}
	}
	f(-0.7, 21.3, []string{"0 s", "5 s", "10 s", "15 s", "20 s"})
	f(-1.2, 141, []string{"0 s", "20 s", "40 s", "60 s", "80 s", "100 s", "120 s", "140 s"})
	f(0.5, 6.5, []string{"1 s", "2 s", "3 s", "4 s", "5 s", "6 s"})
	f(0, 620, []string{"0 s", "120 s", "240 s", "360 s", "480 s", "600 s"})
}

// A chart renders with its legend below the plot, every series named.
func TestDrawChart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.png")
	line := plotter.XYs{{X: 0.5, Y: 1}, {X: 1.5, Y: 2}, {X: 2.5, Y: 3}}
	lines := []series{{name: "a", xy: line, color: blue}, {name: "b", xy: line, color: red, dash: true}, {name: "c", xy: line, color: green, dots: true}}
	if err := drawChart(path, "t", "ms", true, lines, []phase{{"ramp", 0, 1, 0}, {"steady", 1, 3, 10}}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("no chart: %v", err)
	}
	style := plot.New().Legend.TextStyle
	rows := legendRows([]legendEntry{{"one", nil}, {"two", nil}, {"three", nil}}, style, 60)
	if len(rows) < 2 {
		t.Fatalf("legendRows in 60 points: %d rows; want the entries wrapped", len(rows))
	}
}
