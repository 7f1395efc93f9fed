package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/google/pprof/profile"
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
	read := func(path string) (*profile.Profile, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		p, err := profile.Parse(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return p, nil
	}
	p, err := read(path)
	if err != nil || base == "" {
		return p, err
	}
	b, err := read(base)
	if err != nil {
		return nil, err
	}
	b.Scale(-1)
	m, err := profile.Merge([]*profile.Profile{p, b})
	if err != nil {
		return nil, fmt.Errorf("%s minus %s: %w", path, base, err)
	}
	return m, nil
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
	sort.Slice(t.Entries, func(i, j int) bool {
		if t.Entries[i].Flat != t.Entries[j].Flat {
			return t.Entries[i].Flat > t.Entries[j].Flat
		}
		return t.Entries[i].Func < t.Entries[j].Func
	})
	if len(t.Entries) > n {
		t.Entries = t.Entries[:n]
	}
	return t, nil
}

// format writes v in the profile's unit, compactly.
func (t *topList) format(v int64) string {
	switch t.Unit {
	case "nanoseconds":
		return fmt.Sprintf("%.2fs", float64(v)/1e9)
	case "bytes":
		return mib(float64(v))
	}
	return fmt.Sprint(v)
}

// mib formats bytes in MiB or KiB.
func mib(b float64) string {
	if b >= 1<<20 || b <= -(1<<20) {
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", b/(1<<10))
}
