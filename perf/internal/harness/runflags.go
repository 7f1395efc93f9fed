package harness

import (
	"flag"
	"path/filepath"
	"strings"
	"syscall"
)

// FDMargin is what a process needs beyond one descriptor per connection:
// listeners, epoll, the admin and control HTTP, stdio, the runtime (the
// load client's own margin is 64).
const FDMargin = 100

// RunFlags are the flags of a tool that runs bin/server and bin/loadclient
// on loopback and writes the run into a directory of its own: -source,
// -bin, -out, -server-flags and -client-flags.
type RunFlags struct {
	Source      string // the load client's -source
	Bin         string // holds server and loadclient
	Out         string // the run goes into Out/<prefix><time>/
	ServerFlags string // more server flags, space-separated
	ClientFlags string // more load client flags, space-separated

	tool string
}

// Add defines the flags on fs for tool, whose runs land in
// -out/<prefix><time>/.
func (r *RunFlags) Add(fs *flag.FlagSet, tool, prefix string) {
	r.tool = tool
	fs.StringVar(&r.Source, "source", "127.0.0.2-127.0.0.20", "the load client's -source `addresses`: several, so that no source address runs out of ports (empty: the kernel's choice)")
	fs.StringVar(&r.Bin, "bin", "bin", "`dir` holding the server and loadclient binaries (make build)")
	fs.StringVar(&r.Out, "out", filepath.Join("perf", "out"), "write the run into `dir`/"+prefix+"<time>/")
	fs.StringVar(&r.ServerFlags, "server-flags", "", "more server `flags`, space-separated (e.g. \"-sets 8 -wait yield\"); -listen, -admin and -log-format are "+tool+"'s")
	fs.StringVar(&r.ClientFlags, "client-flags", "", "more load client `flags`, space-separated (e.g. \"-loops 1\")")
}

// Server, Client and NATSServer are the binaries.
func (r *RunFlags) Server() string     { return filepath.Join(r.Bin, "server") }
func (r *RunFlags) Client() string     { return filepath.Join(r.Bin, "loadclient") }
func (r *RunFlags) NATSServer() string { return filepath.Join(r.Bin, "nats-server") }

// Validate reports what is wrong with these flags and with a run of users
// connections sending group envelopes of recipients shares: users must be
// at least 2 and more than recipients, and fit the open-files limit in
// both processes; recipients 1..100.
func (r *RunFlags) Validate(users, recipients int) error {
	var bad Problems
	bad.If(users < 2 || users < recipients+1, "-users=%d: want at least 2 and more than -recipients", users)
	var lim syscall.Rlimit
	err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	bad.If(err == nil && uint64(users+FDMargin) > lim.Cur, "-users=%d: the server and the load client each need %d descriptors; the open-files limit is %d", users, users+FDMargin, lim.Cur)
	bad.If(recipients < 1 || recipients > 100, "-recipients=%d: want 1..100 (the server's default -max-shares)", recipients)
	if r.Source != "" {
		_, err := ParseLoopbackSources(r.Source)
		bad.Add(err)
	}
	for _, f := range strings.Fields(r.ServerFlags) {
		name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		bad.If(name == "listen" || name == "admin" || name == "log-format", "-server-flags: %s is %s's to set", f, r.tool)
	}
	return bad.Err()
}
