package main

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// topEntry is one function of a profile's top list.
type topEntry struct {
	Func      string
	Flat, Cum int64
}

// topList is what `go tool pprof -top` prints first.
type topList struct {
	Unit    string // of the sample type
	Total   int64
	Entries []topEntry
}

// readProfile reads a profile file; base, if not "", is subtracted from it
// (pprof -base).
func readProfile(path, base string) (*profile.Profile, error) {
	var ps []*profile.Profile
	for i, file := range []string{path, base} {
		if file == "" {
			break
		}
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		p, err := profile.Parse(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if i == 1 {
			p.Scale(-1)
		}
		ps = append(ps, p)
	}
	return profile.Merge(ps)
}

// top returns the n functions with the most flat value of sample type
// sampleType (e.g. "cpu", "alloc_space"): flat counts the innermost frame
// of each stack, inlined calls included; cum every function once per stack.
func top(p *profile.Profile, sampleType string, n int) (topList, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == sampleType {
			idx = i
		}
	}
	if idx < 0 {
		return topList{}, fmt.Errorf("profile has no sample type %q", sampleType)
	}
	t := topList{Unit: p.SampleType[idx].Unit}
	flat, cum := map[string]int64{}, map[string]int64{}
	for _, s := range p.Sample {
		v := s.Value[idx]
		if v == 0 {
			continue
		}
		t.Total += v
		seen := map[string]bool{}
		leaf := true
		for _, loc := range s.Location {
			for _, line := range loc.Line { // innermost first
				if line.Function == nil {
					continue
				}
				name := line.Function.Name
				if leaf {
					flat[name] += v
					leaf = false
				}
				if !seen[name] {
					seen[name] = true
					cum[name] += v
				}
			}
		}
	}
	for name, v := range flat {
		t.Entries = append(t.Entries, topEntry{Func: name, Flat: v, Cum: cum[name]})
	}
	slices.SortFunc(t.Entries, func(a, b topEntry) int { return cmp.Or(cmp.Compare(b.Flat, a.Flat), strings.Compare(a.Func, b.Func)) })
	t.Entries = t.Entries[:min(n, len(t.Entries))]
	return t, nil
}

// format writes v in the profile's unit, compactly.
func (t *topList) format(v int64) string {
	switch {
	case t.Unit == "nanoseconds":
		return fmt.Sprintf("%.2fs", float64(v)/1e9)
	case t.Unit == "bytes" && (v >= 1<<20 || v <= -(1<<20)):
		return harness.MiB(v)
	case t.Unit == "bytes": // harness.MiB would say 0.0 MiB
		return fmt.Sprintf("%.1f KiB", float64(v)/(1<<10))
	}
	return fmt.Sprint(v)
}
