package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Run is one run of a tool: its directory under -out, what it prints
// (kept, for a report that repeats it), and its steps as commands.
type Run struct {
	Name           string // prefixes what Say prints: "demo: …"
	Dir            string
	Stdout, Stderr io.Writer
	Steps          Steps

	mu    sync.Mutex
	lines []string
}

// NewRun creates out/<prefix><time>/ for tool name's files.
func NewRun(out, prefix, name string, stdout, stderr io.Writer) (*Run, error) {
	dir := filepath.Join(out, prefix+time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Run{Name: name, Dir: dir, Stdout: stdout, Stderr: stderr}, nil
}

// Path names a file of the run.
func (r *Run) Path(name string) string { return filepath.Join(r.Dir, name) }

// Printf prints a line and keeps it.
func (r *Run) Printf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, s)
	fmt.Fprintln(r.Stdout, s)
}

// Say is Printf after the tool's name.
func (r *Run) Say(format string, args ...any) { r.Printf(r.Name+": "+format, args...) }

// Lines are what Printf and Say printed.
func (r *Run) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// Step records a step now, as the command that does it by hand.
func (r *Run) Step(what, cmd string) { r.Steps.Add(time.Now(), what, cmd, 0) }

// StartServer starts a server with its log in the run's directory (log:
// its file name) and its warnings echoed, and records the step.
func (r *Run) StartServer(ctx context.Context, log string, cfg ServerConfig) (*Server, error) {
	cfg.Log = r.Path(log)
	if cfg.Echo == nil {
		cfg.Echo = r.Stderr
	}
	srv, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	r.Step("start the server, its log in "+log, strings.TrimSpace(strings.Join(cfg.Env, " ")+" "+srv.CommandLine()))
	return srv, nil
}

// StartClient starts the load client with its files in the run's
// directory and records the step.
func (r *Run) StartClient(ctx context.Context, srv *Server, cfg ClientConfig) (*Client, error) {
	if cfg.Dir == "" {
		cfg.Dir = r.Dir
	}
	c, err := StartClient(ctx, srv, cfg)
	if err != nil {
		return nil, err
	}
	r.Steps.Add(c.Launched, "run the load client (a live line every second in its log)", c.CommandLine(), 0)
	return c, nil
}

// Report prints text, the run's report, writes it to report.txt and
// summary as JSON to summary.json, and lists the run's files.
func (r *Run) Report(text string, summary any, files string) {
	fmt.Fprint(r.Stdout, text)
	os.WriteFile(r.Path("report.txt"), []byte(text), 0o644)
	if j, err := json.MarshalIndent(summary, "", "  "); err == nil {
		os.WriteFile(r.Path("summary.json"), j, 0o644)
	}
	fmt.Fprintf(r.Stdout, "\n%s: files in %s/ (report.txt, summary.json, %s)\n", r.Name, r.Dir, files)
}

// WriteCommands writes commands.txt.
func (r *Run) WriteCommands() error { return r.Steps.Write(r.Path("commands.txt"), r.Name) }

// Steps records what a run does, each step as the command a user would type
// to do it by hand. Safe for concurrent use.
type Steps struct {
	mu    sync.Mutex
	start time.Time // the load client's start: steps say when they ran relative to it
	list  []Step
}

// Step is one step of a run.
type Step struct {
	At       time.Time
	What     string
	Cmd      string
	Duration time.Duration // how long it took, if it is timed
}

// Add records a step.
func (s *Steps) Add(at time.Time, what, cmd string, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, Step{At: at, What: what, Cmd: cmd, Duration: took})
}

// SetStart sets the time the steps are told relative to.
func (s *Steps) SetStart(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start = t
}

// All returns the steps in the order they started, with the run's start.
func (s *Steps) All() ([]Step, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.list)
	slices.SortStableFunc(out, func(a, b Step) int { return a.At.Compare(b.At) })
	return out, s.start
}

// When formats t relative to the run's start.
func When(t, start time.Time) string {
	if start.IsZero() {
		return t.Format("15:04:05.000")
	}
	return fmt.Sprintf("t=%+.1fs", t.Sub(start).Seconds())
}

// Write writes the steps of tool's run as a shell-readable file: each
// command with a comment saying when it ran and why.
func (s *Steps) Write(path, tool string) error {
	list, start := s.All()
	var b strings.Builder
	fmt.Fprintf(&b, "# The commands of this %s run, in order", tool)
	if !start.IsZero() {
		fmt.Fprintf(&b, "; t is seconds since the load client's start (%s)", start.Format(time.RFC3339Nano))
	}
	b.WriteString(".\n# Ports are the ones the kernel chose for this run; by hand, pick fixed ones (-listen 127.0.0.1:9000 -admin 127.0.0.1:6060).\n\n")
	for _, st := range list {
		took := ""
		if st.Duration > 0 {
			took = fmt.Sprintf(" (took %v)", st.Duration.Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "# %s: %s%s\n%s\n\n", When(st.At, start), st.What, took, st.Cmd)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
