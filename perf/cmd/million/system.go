package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"hongbao/perf/internal/harness"
)

// system is the machine at one moment: /proc/meminfo, the TCP line of
// /proc/net/sockstat and the connection tracker's count.
type system struct {
	At           time.Time
	MemTotal     int64 // bytes
	MemAvailable int64
	Slab         int64
	SReclaimable int64
	SUnreclaim   int64
	TCP          map[string]int64 // inuse, orphan, tw, alloc, mem (pages)
	Conntrack    int64            // -1: no connection tracker
	Busy         time.Duration    // every CPU's busy time so far (/proc/stat)
}

// parseMeminfo reads /proc/meminfo's "Name: N kB" lines into bytes.
func parseMeminfo(b []byte) map[string]int64 {
	m := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) == 2 && f[1] == "kB" {
			v <<= 10
		}
		m[name] = v
	}
	return m
}

// parseSockstat reads the "TCP:" line of /proc/net/sockstat: inuse, orphan,
// tw, alloc and mem (pages).
func parseSockstat(b []byte) map[string]int64 {
	m := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "TCP:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseInt(f[i+1], 10, 64); err == nil {
				m[f[i]] = v
			}
		}
	}
	return m
}

// readSystem reads the machine now.
func readSystem() (system, error) {
	s := system{At: time.Now(), Conntrack: -1}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return s, err
	}
	m := parseMeminfo(b)
	for name, p := range map[string]*int64{"MemTotal": &s.MemTotal, "MemAvailable": &s.MemAvailable, "Slab": &s.Slab,
		"SReclaimable": &s.SReclaimable, "SUnreclaim": &s.SUnreclaim} {
		v, ok := m[name]
		if !ok {
			return s, fmt.Errorf("/proc/meminfo: no %s", name)
		}
		*p = v
	}
	b, err = os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return s, err
	}
	s.TCP = parseSockstat(b)
	if b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count"); err == nil {
		s.Conntrack, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	s.Busy, _ = harness.MachineBusy()
	return s, nil
}

// readInts reads a file holding whole numbers separated by white space.
func readInts(path string) ([]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, f := range strings.Fields(string(b)) {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, f, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// gib formats bytes as GiB with two decimals.
func gib(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

// mib formats bytes as MiB with one decimal.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// per formats bytes per item.
func per(b int64, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f B", float64(b)/float64(n))
}

// thousands writes n with comma separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
