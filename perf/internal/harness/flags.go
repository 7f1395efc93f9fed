package harness

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"strings"

	"hongbao/loadclient"
)

// ParseModes parses an -ingress comma list: each entry epoll or netpoll.
func ParseModes(s string) ([]string, error) {
	var modes []string
	var errs []error
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "epoll" && m != "netpoll" {
			errs = append(errs, fmt.Errorf("-ingress: %q: want epoll or netpoll", m))
		} else {
			modes = append(modes, m)
		}
	}
	return modes, errors.Join(errs...)
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
