// Package flame writes the flame graph of a profile as one static HTML file,
// the page `go tool pprof -http` serves at /ui/flamegraph: Render runs
// github.com/google/pprof's driver as a library with an HTTPServer option
// that, instead of listening, calls the /flamegraph handler once. The page
// inlines its script, styles and stacks, so it opens with no server; its
// links to pprof's other views need `go tool pprof -http`. pprof's own page
// stays right as its profile format and views change, as a renderer of our
// own would not.
package flame

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"

	"github.com/google/pprof/driver"
)

// Options says what to render.
type Options struct {
	Profile string // the profile file
	// Base, if set, is subtracted from Profile first (pprof -base): with two
	// allocs profiles, the allocations made between them.
	Base string
	// SampleIndex picks the sample type, e.g. cpu, alloc_space,
	// inuse_space (pprof -sample_index); "" takes the profile's default.
	SampleIndex string
	// Log gets what the driver prints (nil: discarded).
	Log io.Writer
}

// Args returns the pprof command line that serves the same view:
// `go tool pprof` followed by these arguments, then open /ui/flamegraph.
func (o *Options) Args(hostport string) []string {
	args := []string{"-http=" + hostport}
	if o.SampleIndex != "" {
		args = append(args, "-sample_index="+o.SampleIndex)
	}
	if o.Base != "" {
		args = append(args, "-base="+o.Base)
	}
	return append(args, o.Profile)
}

// mu serializes Render: the pprof driver keeps its configuration in package
// state.
var mu sync.Mutex

// Render writes the flame-graph page of o.Profile to out.
func Render(o Options, out string) error {
	mu.Lock()
	defer mu.Unlock()
	log := cmp.Or[io.Writer](o.Log, io.Discard)
	var page []byte
	var serveErr error
	// The driver keeps its config (the sample index…) across calls, so
	// every flag that matters is given each time (an empty -sample_index is
	// the profile's default). HTTPServer below binds no port.
	args := append([]string{"-no_browser", "-sample_index=" + o.SampleIndex}, o.Args("127.0.0.1:0")...)
	err := driver.PProf(&driver.Options{
		Flagset: newFlagset(args),
		UI:      &ui{w: log},
		HTTPServer: func(a *driver.HTTPServerArgs) error {
			h := a.Handlers["/flamegraph"]
			if h == nil {
				serveErr = errors.New("the pprof driver offers no /flamegraph handler")
				return nil
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/flamegraph", nil))
			if rec.Code != http.StatusOK {
				serveErr = fmt.Errorf("pprof /flamegraph answered %d: %s", rec.Code, bytes.TrimSpace(rec.Body.Bytes()))
				return nil
			}
			page = rec.Body.Bytes()
			return nil // do not serve: PProf returns
		},
	})
	if err = errors.Join(err, serveErr); err != nil {
		return fmt.Errorf("flame graph of %s: %w", o.Profile, err)
	}
	if !bytes.Contains(page, []byte("stackViewer(")) {
		return fmt.Errorf("flame graph of %s: pprof's page has no stackViewer call: not the flame graph view", o.Profile)
	}
	return os.WriteFile(out, page, 0o644)
}

// flagset is the driver.FlagSet of one fixed command line, on a
// flag.FlagSet of its own (the driver's GoFlags uses the process's global
// one).
type flagset struct {
	fs    *flag.FlagSet
	args  []string
	extra []string
}

func newFlagset(args []string) *flagset {
	fs := flag.NewFlagSet("pprof", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &flagset{fs: fs, args: args}
}

func (f *flagset) Bool(n string, d bool, u string) *bool          { return f.fs.Bool(n, d, u) }
func (f *flagset) Int(n string, d int, u string) *int             { return f.fs.Int(n, d, u) }
func (f *flagset) Float64(n string, d float64, u string) *float64 { return f.fs.Float64(n, d, u) }
func (f *flagset) String(n, d, u string) *string                  { return f.fs.String(n, d, u) }
func (f *flagset) StringList(n, d, u string) *[]*string {
	return &[]*string{f.fs.String(n, d, u)}
}
func (f *flagset) ExtraUsage() string      { return strings.Join(f.extra, "\n") }
func (f *flagset) AddExtraUsage(eu string) { f.extra = append(f.extra, eu) }
func (f *flagset) Parse(usage func()) []string {
	if err := f.fs.Parse(f.args); err != nil {
		usage()
		return nil
	}
	return f.fs.Args()
}

// ui is a driver.UI that only logs: no terminal, no browser, no prompt.
type ui struct{ w io.Writer }

func (u *ui) ReadLine(string) (string, error)     { return "", io.EOF }
func (u *ui) Print(args ...any)                   { fmt.Fprintln(u.w, strings.TrimSuffix(fmt.Sprint(args...), "\n")) }
func (u *ui) PrintErr(args ...any)                { u.Print(args...) }
func (u *ui) IsTerminal() bool                    { return false }
func (u *ui) WantBrowser() bool                   { return false }
func (u *ui) SetAutoComplete(func(string) string) {}
