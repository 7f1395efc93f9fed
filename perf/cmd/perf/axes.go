package main

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// secondTicks marks a time axis in whole seconds: labelled ticks a round
// step apart (1, 2, 5, 10, 15, 20, 30 s, …, whichever gives at most ten),
// unlabelled ones on whole seconds between them.
type secondTicks struct{}

// tickSteps are the label steps secondTicks picks from, in seconds, each
// with the step of its unlabelled ticks.
var tickSteps = []struct{ major, minor float64 }{
	{1, 0}, {2, 1}, {5, 1}, {10, 2}, {20, 5}, {30, 10}, {60, 10}, {120, 30},
	{300, 60}, {600, 120}, {1200, 300}, {1800, 600}, {3600, 600},
}

func (secondTicks) Ticks(lo, hi float64) []plot.Tick {
	step := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		if (hi-lo)/s.major <= 10 {
			step = s
			break
		}
	}
	var ticks []plot.Tick
	every := step.minor
	if every == 0 {
		every = step.major
	}
	for t := math.Ceil(lo/every) * every; t <= hi; t += every {
		if t == 0 {
			t = 0 // not -0, from Ceil of a small negative
		}
		tick := plot.Tick{Value: t}
		if math.Mod(t, step.major) == 0 {
			tick.Label = fmt.Sprintf("%.0f s", t)
		}
		ticks = append(ticks, tick)
	}
	return ticks
}

// legendEntry is one line's name and how it looks.
type legendEntry struct {
	name  string
	thumb plot.Thumbnailer
}

// The legend strip below the plot: entries side by side, in rows as wide
// as the chart.
const (
	legendRowH   vg.Length = 14 // points
	legendThumbW vg.Length = 22
	legendGap    vg.Length = 16
)

// legendRows lays the entries out in rows no wider than width.
func legendRows(entries []legendEntry, style text.Style, width vg.Length) [][]legendEntry {
	var rows [][]legendEntry
	var row []legendEntry
	var w vg.Length
	for _, e := range entries {
		ew := entryW(e, style)
		if len(row) > 0 && w+legendGap+ew > width {
			rows, row, w = append(rows, row), nil, 0
		}
		if len(row) > 0 {
			w += legendGap
		}
		row, w = append(row, e), w+ew
	}
	if len(row) > 0 {
		rows = append(rows, row)
	}
	return rows
}

// entryW is the width of e's thumbnail and name.
func entryW(e legendEntry, style text.Style) vg.Length {
	return legendThumbW + vg.Points(4) + style.Rectangle(e.name).Max.X
}

// drawLegend draws the rows centred in c, top down.
func drawLegend(c draw.Canvas, rows [][]legendEntry, style text.Style) {
	y := c.Max.Y - legendRowH
	for _, row := range rows {
		w := -legendGap
		for _, e := range row {
			w += legendGap + entryW(e, style)
		}
		x := c.Min.X + (c.Max.X-c.Min.X-w)/2
		for _, e := range row {
			icon := draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
				Min: vg.Point{X: x, Y: y + vg.Points(2)}, Max: vg.Point{X: x + legendThumbW, Y: y + legendRowH - vg.Points(2)}}}
			e.thumb.Thumbnail(&icon)
			x += legendThumbW + vg.Points(4)
			c.FillText(style, vg.Point{X: x, Y: y + vg.Points(3)}, e.name)
			x += style.Rectangle(e.name).Max.X + legendGap
		}
		y -= legendRowH
	}
}

// phaseMarks draws each phase's start as a dotted vertical line, named at
// the top of the data area.
type phaseMarks []phase

func (m phaseMarks) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	style := draw.LineStyle{Color: grey, Width: vg.Points(0.8), Dashes: []vg.Length{vg.Points(1), vg.Points(2)}}
	text := p.Title.TextStyle
	text.Color = grey
	text.Font.Size = vg.Points(8)
	text.XAlign = draw.XLeft
	for _, ph := range m {
		if ph.From < p.X.Min || ph.From > p.X.Max {
			continue
		}
		x := trX(ph.From)
		c.StrokeLine2(style, x, c.Min.Y, x, c.Max.Y)
		c.FillText(text, vg.Point{X: x + vg.Points(2), Y: c.Max.Y - vg.Points(10)}, ph.Name)
	}
}
