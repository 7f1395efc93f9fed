package main

import (
	"testing"

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
