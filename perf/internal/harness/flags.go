package harness

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
)

// ParseModes parses an -ingress comma list: each entry epoll or netpoll.
func ParseModes(s string) ([]string, error) {
	var modes []string
	var bad Problems
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "epoll" && m != "netpoll" {
			bad.If(true, "-ingress: %q: want epoll or netpoll", m)
		} else {
			modes = append(modes, m)
		}
	}
	return modes, bad.Err()
}

// ParseLoopbackSources parses -source like the load client does, and checks
// that every address is IPv4 loopback: the tools load this machine only.
func ParseLoopbackSources(s string) ([]netip.Addr, error) {
	addrs, err := loadclient.ParseSources(s)
	if err != nil {
		return nil, fmt.Errorf("-source: %w", err)
	}
	var errs []error
	for _, a := range addrs {
		if !a.Is4() || !a.IsLoopback() {
			errs = append(errs, fmt.Errorf("-source: %v is not an IPv4 loopback address", a))
		}
	}
	return addrs, errors.Join(errs...)
}

// ParseArgs parses a tool's command line, which takes flags only.
func ParseArgs(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}

// SetFlags returns the flags of fs that the command line set, in name order,
// each as -name value (-name=value for a boolean flag, which takes no
// separate value) with the value quoted for a POSIX shell where it needs it:
// the command line that repeats the run.
func SetFlags(fs *flag.FlagSet) string {
	var parts []string
	fs.Visit(func(f *flag.Flag) {
		v := ShellQuote(f.Value.String())
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			parts = append(parts, "-"+f.Name+"="+v)
			return
		}
		parts = append(parts, "-"+f.Name, v)
	})
	return strings.Join(parts, " ")
}

// Given is the names of the flags fs's command line set, for defaults that
// depend on other flags.
func Given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// ShellQuote returns s as one word of a POSIX shell command: as it is when
// it holds only characters the shell leaves alone, else in double quotes.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-") == "" {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`")
	return `"` + r.Replace(s) + `"`
}

// ParseModesSources parses the -ingress and -source flags of the tools that
// connect from this process: ParseModes and ParseLoopbackSources, both
// errors reported.
func ParseModesSources(modes, sources string) ([]string, []netip.Addr, error) {
	m, errModes := ParseModes(modes)
	s, errSources := ParseLoopbackSources(sources)
	return m, s, errors.Join(errModes, errSources)
}

// ParseDuration takes a Go duration or a whole number of seconds, so that
// make demo DURATION=60 works as well as DURATION=1m.
func ParseDuration(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("cannot parse duration %q: want 30s, 2m or whole seconds", s)
	}
	return d, nil
}

// Problems collects what is wrong with a command line, to report all at
// once.
type Problems []error

// If adds the problem when bad holds.
func (p *Problems) If(bad bool, format string, args ...any) {
	if bad {
		*p = append(*p, fmt.Errorf(format, args...))
	}
}

// Add adds errors; nil ones are none.
func (p *Problems) Add(errs ...error) {
	*p = append(*p, slices.DeleteFunc(errs, func(err error) bool { return err == nil })...)
}

// Err is every problem joined, nil for none.
func (p Problems) Err() error { return errors.Join(p...) }

// Usage makes fs's -help print "usage: <name> [flags]", about, and the
// flags.
func Usage(fs *flag.FlagSet, about string) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s [flags]\n\n%s\nFlags:\n", fs.Name(), about)
		fs.PrintDefaults()
	}
}
