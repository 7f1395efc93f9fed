package loadclient

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Why connects failed: each kind of failure to connect or log in (an errno such as
// ECONNREFUSED or EMFILE, a connect or LOGIN timeout, a LOGIN refused with a status, an ERROR
// or EOF before LOGIN_ACK) counted, with the first of each kind kept word for word.

// maxFailKinds bounds the kinds kept: a failing run has a handful; the rest are counted in
// Other, so that a loop's counters stay the same size however many connects fail.
const maxFailKinds = 8

// connFailures counts the failures to connect or log in by kind.
type connFailures struct {
	Kinds [maxFailKinds]connFailure
	Other uint64 // failures of kinds beyond the first maxFailKinds
}

// connFailure is one kind of failure: how many, and the first of them (the earliest, in a
// sum).
type connFailure struct {
	Kind  string `json:",omitempty"` // empty: a free slot
	Count uint64 `json:",omitempty"`
	First string `json:",omitempty"` // the first failure's text
	AtNs  int64  `json:",omitempty"` // when it happened, Unix ns
}

// note counts a failure of kind at atNs and returns its entry when it is the first of its
// kind, for the caller to describe; nil otherwise.
func (fs *connFailures) note(kind string, atNs int64) *connFailure {
	for i := range fs.Kinds {
		f := &fs.Kinds[i]
		switch f.Kind {
		case kind:
			f.Count++
			return nil
		case "":
			*f = connFailure{Kind: kind, Count: 1, AtNs: atNs}
			return f
		}
	}
	fs.Other++
	return nil
}

// add adds o to fs, keeping the earlier first failure of a kind both have.
func (fs *connFailures) add(o *connFailures) {
	fs.Other += o.Other
	for _, of := range o.Kinds {
		if of.Kind == "" {
			break
		}
		fs.merge(of)
	}
}

func (fs *connFailures) merge(of connFailure) {
	for i := range fs.Kinds {
		f := &fs.Kinds[i]
		switch f.Kind {
		case of.Kind:
			f.Count += of.Count
			if of.AtNs < f.AtNs {
				f.First, f.AtNs = of.First, of.AtNs
			}
			return
		case "":
			*f = of
			return
		}
	}
	fs.Other += of.Count
}

// ConnectFailuresReport is why connects failed: every attempt to connect and log in that did
// not end logged in, by kind, most frequent first.
type ConnectFailuresReport struct {
	Total uint64                 `json:"total"`
	Kinds []ConnectFailureReport `json:"kinds"`
	Other uint64                 `json:"other,omitempty"` // of kinds beyond the ones kept
}

// ConnectFailureReport is one kind of connect failure.
type ConnectFailureReport struct {
	Kind     string  `json:"kind"`       // ECONNREFUSED, connect timeout, LOGIN status 1, ERROR 8, EOF, wrong gateway, owner unknown, ...
	Count    uint64  `json:"count"`      // failures of this kind
	First    string  `json:"first"`      // the first one's text, e.g. connect 127.0.0.1:9000: connection refused
	FirstAtS float64 `json:"first_at_s"` // when it happened, seconds from the start of the run
}

// reportOf sorts fs for the report; times count from startNs.
func (fs *connFailures) reportOf(startNs int64) ConnectFailuresReport {
	r := ConnectFailuresReport{Total: fs.Other, Other: fs.Other, Kinds: []ConnectFailureReport{}}
	for _, f := range fs.Kinds {
		if f.Kind == "" {
			break
		}
		r.Total += f.Count
		r.Kinds = append(r.Kinds, ConnectFailureReport{
			Kind: f.Kind, Count: f.Count, First: f.First, FirstAtS: float64(f.AtNs-startNs) / float64(time.Second),
		})
	}
	sort.SliceStable(r.Kinds, func(i, j int) bool { return r.Kinds[i].Count > r.Kinds[j].Count })
	return r
}

// writeSummary prints r on one line, e.g.
//
//	connect failures: 1,203 (ECONNREFUSED ×1,200: first "connect 127.0.0.1:9000: connection refused" at 12.3 s; EMFILE ×3: first "socket for 127.0.0.1:9000: too many open files" at 14.0 s)
//
// and nothing when none failed.
func (r *ConnectFailuresReport) writeSummary(w io.Writer) {
	if r.Total == 0 {
		return
	}
	var parts []string
	for _, k := range r.Kinds {
		parts = append(parts, fmt.Sprintf("%s ×%s: first %q at %.1f s", k.Kind, thousands(k.Count), k.First, k.FirstAtS))
	}
	if r.Other > 0 {
		parts = append(parts, fmt.Sprintf("other kinds ×%s", thousands(r.Other)))
	}
	fmt.Fprintf(w, "connect failures: %s (%s)\n", thousands(r.Total), strings.Join(parts, "; "))
}

// thousands formats n with commas between groups of three digits.
func thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
