package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hongbao-io/hongbao/perf/internal/flame"
)

// flameOut is one rendered flame graph.
type flameOut struct {
	File, Title string
	Cmd         string // the go tool pprof command that serves the same view
}

// renderFlames renders the flame graph of every profile the captures got.
// The driver reads and writes its settings under the user's config dir;
// pprof's log goes to flame.log.
func renderFlames(a *analysis, dir string, stderr io.Writer) ([]flameOut, error) {
	logf, err := os.Create(filepath.Join(dir, "flame.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	var out []flameOut
	var errs []error
	for _, f := range []struct {
		file, title string
		o           flame.Options
	}{
		{"flame-cpu.html", "CPU, steady phase", flame.Options{Profile: "cpu.pprof", SampleIndex: "cpu"}},
		{"flame-allocs.html", "bytes allocated during the CPU profile (allocs minus allocs-start)",
			flame.Options{Profile: "allocs.pprof", Base: "allocs-start.pprof", SampleIndex: "alloc_space"}},
		{"flame-heap.html", "live heap right after the CPU profile (inuse_space)", flame.Options{Profile: "heap.pprof", SampleIndex: "inuse_space"}},
	} {
		if !slices.Contains(a.caps.Files, f.o.Profile) || f.o.Base != "" && !slices.Contains(a.caps.Files, f.o.Base) {
			continue
		}
		cmd := "go tool pprof " + strings.Join(f.o.Args("127.0.0.1:8081"), " ") + "   # then open http://127.0.0.1:8081/ui/flamegraph"
		o := f.o
		o.Profile, o.Log = filepath.Join(dir, o.Profile), logf
		if o.Base != "" {
			o.Base = filepath.Join(dir, o.Base)
		}
		if err := flame.Render(o, filepath.Join(dir, f.file)); err != nil {
			errs = append(errs, err)
			fmt.Fprintf(stderr, "perf: %v\n", err)
			continue
		}
		out = append(out, flameOut{File: f.file, Title: f.title, Cmd: cmd})
	}
	return out, errors.Join(errs...)
}
