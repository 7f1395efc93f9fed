package flame

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// writeProfile writes a profile of two stacks, main→work→hot (weights hot)
// and main→idle (weight 1), with cpu and alloc_space samples.
func writeProfile(t *testing.T, path string, hot int64) {
	t.Helper()
	fn := func(id uint64, name string) *profile.Function {
		return &profile.Function{ID: id, Name: name, SystemName: name, Filename: "x.go"}
	}
	fMain, fWork, fHot, fIdle := fn(1, "main.main"), fn(2, "main.work"), fn(3, "main.hot"), fn(4, "main.idle")
	loc := func(id uint64, f *profile.Function) *profile.Location {
		return &profile.Location{ID: id, Line: []profile.Line{{Function: f, Line: int64(id)}}}
	}
	lMain, lWork, lHot, lIdle := loc(1, fMain), loc(2, fWork), loc(3, fHot), loc(4, fIdle)
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_000_000,
		Sample: []*profile.Sample{
			{Location: []*profile.Location{lHot, lWork, lMain}, Value: []int64{hot, hot * 10_000_000}},
			{Location: []*profile.Location{lIdle, lMain}, Value: []int64{1, 10_000_000}},
		},
		Location: []*profile.Location{lMain, lWork, lHot, lIdle},
		Function: []*profile.Function{fMain, fWork, fHot, fIdle},
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
}

func TestRender(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir) // the driver looks for saved settings there
	prof, base, out := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "base.pprof"), filepath.Join(dir, "flame.html")
	writeProfile(t, prof, 9)
	writeProfile(t, base, 4)
	f := func(o Options) string {
		t.Helper()
		if err := Render(o, out); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		page := string(b)
		// Self-contained: the script is inline, nothing is fetched.
		for _, want := range []string{"<html", "stackViewer(", "main.hot", "main.work"} {
			if !strings.Contains(page, want) {
				t.Fatalf("Render(%+v): the page has no %q", o, want)
			}
		}
		if strings.Contains(page, "<script src=") {
			t.Fatalf("Render(%+v): the page loads a script from elsewhere", o)
		}
		return page
	}
	f(Options{Profile: prof, SampleIndex: "cpu"})
	// Subtracting base leaves main.hot's 5 extra samples and no main.idle.
	page := f(Options{Profile: prof, Base: base, SampleIndex: "samples"})
	if strings.Contains(page, "main.idle") {
		t.Fatalf("Render with -base: main.idle is still in the page; want it subtracted away")
	}
	// A sample index of an earlier call must not stick (the driver keeps state).
	f(Options{Profile: prof})
}

func TestRenderErrors(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	if err := Render(Options{Profile: filepath.Join(dir, "missing.pprof")}, filepath.Join(dir, "x.html")); err == nil {
		t.Fatal("Render of a missing profile: no error")
	}
	prof := filepath.Join(dir, "cpu.pprof")
	writeProfile(t, prof, 1)
	if err := Render(Options{Profile: prof, SampleIndex: "alloc_space"}, filepath.Join(dir, "x.html")); err == nil {
		t.Fatal("Render with a sample index the profile lacks: no error")
	}
}

func TestArgs(t *testing.T) {
	o := Options{Profile: "allocs.pprof", Base: "allocs-start.pprof", SampleIndex: "alloc_space"}
	got := strings.Join(o.Args("127.0.0.1:8081"), " ")
	if want := "-http=127.0.0.1:8081 -sample_index=alloc_space -base=allocs-start.pprof allocs.pprof"; got != want {
		t.Fatalf("Args = %q; want %q", got, want)
	}
}
