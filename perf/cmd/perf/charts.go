package main

import (
	"errors"
	"fmt"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/hongbao-io/hongbao/perf/internal/runlog"
)

// chart is one PNG of the report.
type chart struct {
	File, Title, Caption string
}

// Chart size: wide enough for a few minutes at one point a second.
const (
	chartW = 22 * vg.Centimeter
	chartH = 9 * vg.Centimeter
)

var (
	blue   = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	orange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	green  = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	red    = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	grey   = color.RGBA{R: 120, G: 120, B: 120, A: 255}
	purple = color.RGBA{R: 148, G: 103, B: 189, A: 255}
)

// series is one line of a chart.
type series struct {
	name  string
	xy    plotter.XYs
	color color.Color
	dash  bool
	dots  bool // points, not a line
	steps bool // a step function: its points are far apart on purpose
}

// maxStep is the widest x gap a line bridges: points come a second apart,
// so a wider gap is a stretch without data (no SHAKE answered, say), drawn
// as a gap rather than as a straight line across it.
const maxStep = 1.6

// segments splits xy where consecutive points are more than maxStep apart.
func segments(xy plotter.XYs) []plotter.XYs {
	var out []plotter.XYs
	from := 0
	for i := 1; i <= len(xy); i++ {
		if i == len(xy) || xy[i].X-xy[i-1].X > maxStep {
			out = append(out, xy[from:i])
			from = i
		}
	}
	return out
}

// renderCharts draws every chart of the run into dir and returns them.
func renderCharts(a *analysis, dir string) ([]chart, error) {
	tl := a.timeline
	// A timeline row at T measures the second (T−1, T]: drawn at its
	// middle.
	col := func(get func(*runlog.Second) float64, skipZero bool) plotter.XYs {
		var xy plotter.XYs
		for i := range tl {
			v := get(&tl[i])
			if skipZero && v <= 0 {
				continue
			}
			xy = append(xy, plotter.XY{X: tl[i].T - 0.5, Y: v})
		}
		return xy
	}
	// The target, a step a phase, from the plan itself.
	var target plotter.XYs
	for _, p := range a.phases {
		target = append(target, plotter.XY{X: p.From, Y: float64(p.QPS)}, plotter.XY{X: p.To, Y: float64(p.QPS)})
	}
	var srvT []float64
	for i := range a.samples {
		srvT = append(srvT, a.t(a.samples[i].At))
	}
	fromSamples := func(get func(*harness.Sample) float64) plotter.XYs {
		var xy plotter.XYs
		for i := range a.samples {
			if a.samples[i].Err == nil {
				xy = append(xy, plotter.XY{X: srvT[i], Y: get(&a.samples[i])})
			}
		}
		return xy
	}
	// From successive samples: CPU cores a second, and the server's own
	// ingress → egress p99 and p99.9 each second (bucket upper bounds) of
	// the SHAKEs alone when its histogram is labelled by request type, else
	// of every answer.
	var cores, client, machine, srvP99, srvP999 plotter.XYs
	srvWhat := "every answer"
	rate := func(xy *plotter.XYs, x float64, d0, d1 time.Duration, dt float64) {
		if d0 > 0 && d1 > 0 {
			*xy = append(*xy, plotter.XY{X: x, Y: (d1 - d0).Seconds() / dt})
		}
	}
	for i := 1; i < len(a.samples); i++ {
		s0, s1 := &a.samples[i-1], &a.samples[i]
		if dt := s1.At.Sub(s0.At).Seconds(); dt > 0 {
			cores = append(cores, plotter.XY{X: srvT[i], Y: (s1.CPU - s0.CPU).Seconds() / dt})
			rate(&client, srvT[i], s0.Client, s1.Client, dt)
			rate(&machine, srvT[i], s0.Machine, s1.Machine, dt)
		}
		if s0.Metrics == nil || s1.Metrics == nil {
			continue
		}
		h, shake := serverLatency(s0, s1)
		if shake != nil {
			h, srvWhat = shake, "SHAKE"
		}
		for _, q := range []struct {
			q  float64
			xy *plotter.XYs
		}{{0.99, &srvP99}, {0.999, &srvP999}} {
			if v := runlog.Quantile(h, q.q); runlog.Total(h) > 0 && !math.IsNaN(v) && !math.IsInf(v, 0) {
				*q.xy = append(*q.xy, plotter.XY{X: srvT[i] - 0.5, Y: v * 1e3})
			}
		}
	}
	var pauses, heapMB plotter.XYs
	for i := range a.gcs {
		g := &a.gcs[i]
		pauses = append(pauses, plotter.XY{X: a.gcT(g), Y: float64(g.Pause().Microseconds()) / 1e3})
		heapMB = append(heapMB, plotter.XY{X: a.gcT(g), Y: float64(g.HeapLive)})
	}

	charts := []struct {
		chart
		yLabel string
		log    bool
		lines  []series
	}{
		{chart{"qps.png", "SHAKE rate: target vs achieved", "SHAKEs a second the plan asked for, the client sent, and the server answered (load client timeline)."},
			"SHAKEs / s", false, []series{
				{name: "target", xy: target, color: grey, dash: true, steps: true},
				{name: "sent", xy: col(func(s *runlog.Second) float64 { return s.Sent }, false), color: blue},
				{name: "answered", xy: col(func(s *runlog.Second) float64 { return s.Answered }, false), color: orange},
			}},
		{chart{"envelopes.png", "Envelopes a second", "SHAKEs that got an envelope (shake campaign), ENVELOPE pushes and OPENs answered ok (send campaign), per second (load client timeline)."},
			"per second", false, []series{
				{name: "got (SHAKE)", xy: col(func(s *runlog.Second) float64 { return s.Got }, false), color: green},
				{name: "pushed (ENVELOPE)", xy: col(func(s *runlog.Second) float64 { return s.Pushes }, false), color: blue},
				{name: "opened (OPEN ok)", xy: col(func(s *runlog.Second) float64 { return s.Opened }, false), color: orange, dash: true},
			}},
		{chart{"latency.png", "SHAKE latency per second (log scale)", fmt.Sprintf("p50, p99 and p99.9 of each second's SHAKEs, from the scheduled send time to the answer (load client, coordinated omission corrected); "+
			"and the server's own p99 and p99.9 each second (`hongbao_latency_seconds`, %s, from the ingress's read (the start of its chunk of up to 64 reads) to the end of the egress write; an upper bound: buckets at most 25 %% wide). "+
			"What the client sees beyond the server's own is in the client, the kernel's socket queues, or waiting for a CPU.", srvWhat)},
			"ms", true, []series{
				{name: "p50", xy: col(func(s *runlog.Second) float64 { return float64(s.P50.Microseconds()) / 1e3 }, true), color: blue},
				{name: "p99", xy: col(func(s *runlog.Second) float64 { return float64(s.P99.Microseconds()) / 1e3 }, true), color: red},
				{name: "p99.9", xy: col(func(s *runlog.Second) float64 { return float64(s.P999.Microseconds()) / 1e3 }, true), color: purple},
				{name: "server p99 (" + srvWhat + ")", xy: srvP99, color: green, dash: true},
				{name: "server p99.9 (" + srvWhat + ")", xy: srvP999, color: orange, dash: true},
			}},
		{chart{"gc.png", "GC stop-the-world pauses", "Each collection's pause (sweep termination + mark termination, wall clock) from GODEBUG=gctrace=1."},
			"pause, ms", false, []series{{name: "pause", xy: pauses, color: red, dots: true}}},
		{chart{"rss.png", "Server memory", "VmRSS (/proc/PID/status) and the Go heap in use (/metrics) every second; the live heap each GC marked (gctrace)."},
			"MiB", false, []series{
				{name: "RSS", xy: fromSamples(func(s *harness.Sample) float64 { return float64(s.RSS) / (1 << 20) }), color: blue},
				{name: "heap in use", xy: fromSamples(func(s *harness.Sample) float64 { return s.Metric("go_memstats_heap_inuse_bytes") / (1 << 20) }), color: orange},
				{name: "live heap after GC", xy: heapMB, color: green, dots: true},
			}},
		{chart{"cpu.png", "CPU", fmt.Sprintf("Cores used each second: the server's and the load client's utime + stime (/proc/PID/stat), and every CPU's busy time (/proc/stat: all processes, whoever else runs too). The machine has %d.", runtime.NumCPU())},
			"cores", false, []series{
				{name: "machine (all processes)", xy: machine, color: grey, dash: true},
				{name: "server", xy: cores, color: blue},
				{name: "load client", xy: client, color: orange},
			}},
	}
	var out []chart
	var errs []error
	for _, c := range charts {
		if err := drawChart(filepath.Join(dir, c.File), c.Title, c.yLabel, c.log, c.lines, a.phases); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.File, err))
			continue
		}
		out = append(out, c.chart)
	}
	return out, errors.Join(errs...)
}

func drawChart(path, title, yLabel string, logY bool, lines []series, phases []phase) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time since the load client's start"
	p.X.Tick.Marker = secondTicks{}
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	var legend []legendEntry
	empty := true
	for _, s := range lines {
		if len(s.xy) == 0 {
			continue
		}
		empty = false
		if s.dots {
			sc, err := plotter.NewScatter(s.xy)
			if err != nil {
				return err
			}
			sc.GlyphStyle.Color = s.color
			sc.GlyphStyle.Radius = vg.Points(2)
			sc.GlyphStyle.Shape = draw.CircleGlyph{}
			p.Add(sc)
			legend = append(legend, legendEntry{s.name, sc})
			continue
		}
		segs := []plotter.XYs{s.xy}
		if !s.steps {
			segs = segments(s.xy)
		}
		for i, seg := range segs {
			l, err := plotter.NewLine(seg)
			if err != nil {
				return err
			}
			l.Color = s.color
			l.Width = vg.Points(1.2)
			if s.dash {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l)
			if i == 0 {
				legend = append(legend, legendEntry{s.name, l})
			}
		}
	}
	if empty {
		p.Title.Text += " (no data)"
	}
	if len(phases) > 0 {
		p.X.Min = min(p.X.Min, phases[0].From)
		p.X.Max = max(p.X.Max, phases[len(phases)-1].To)
	}
	// Headroom above the data for the phase names; the legend is below
	// the plot.
	if logY && !empty {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		// Whole decades, the lower a hair below its power of ten so that
		// LogTicks labels it despite rounding.
		p.Y.Min = math.Pow(10, math.Floor(math.Log10(p.Y.Min))) * 0.999
		p.Y.Max = math.Pow(10, math.Ceil(math.Log10(p.Y.Max)+0.15))
	} else {
		p.Y.Min = min(p.Y.Min, 0)
		p.Y.Max += (p.Y.Max - p.Y.Min) * 0.12
		if p.Y.Max <= p.Y.Min {
			p.Y.Max = p.Y.Min + 1
		}
	}
	p.Add(phaseMarks(phases))

	c, err := draw.NewFormattedCanvas(chartW, chartH, "png")
	if err != nil {
		return err
	}
	dc := draw.New(c)
	style := p.Legend.TextStyle
	style.Font.Size = vg.Points(10)
	rows := legendRows(legend, style, dc.Max.X-dc.Min.X)
	strip := vg.Length(len(rows))*legendRowH + vg.Points(4)
	p.Draw(draw.Crop(dc, 0, 0, strip, 0))
	drawLegend(draw.Crop(dc, 0, 0, 0, strip-(dc.Max.Y-dc.Min.Y)), rows, style)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
