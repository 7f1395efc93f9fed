package loadclient

import (
	"strings"
	"testing"
)

// TestConnFailuresBounded checks that the kinds kept are bounded (the rest counted as other),
// that a sum keeps the earliest first failure of a kind, and the summary line's format.
func TestConnFailuresBounded(t *testing.T) {
	var a connFailures
	for i := range maxFailKinds + 3 {
		kind := string(rune('A' + i))
		f := a.note(kind, int64(100+i))
		if (f != nil) != (i < maxFailKinds) {
			t.Fatalf("first %s, kind %d: got entry %v; want one only for the first %d kinds", kind, i+1, f, maxFailKinds)
		}
		if f != nil {
			f.First = "first " + kind
		}
		if f := a.note(kind, 999); f != nil {
			t.Fatalf("second %s: got an entry; want the first kept", kind)
		}
	}
	if a.Other != 3*2 || a.Kinds[0].Count != 2 || a.Kinds[maxFailKinds-1].Kind != string(rune('A'+maxFailKinds-1)) {
		t.Fatalf("after %d kinds twice: %+v; want %d kept, the other 3 counted twice each as other", maxFailKinds+3, a, maxFailKinds)
	}

	var b connFailures
	b.note("A", 50).First = "earlier A"
	b.note("Z", 60).First = "first Z"
	a.add(&b)
	if f := a.Kinds[0]; f.Count != 3 || f.First != "earlier A" || f.AtNs != 50 {
		t.Errorf("A after the sum: %+v; want 3, the earlier first", f)
	}
	if a.Other != 3*2+1 {
		t.Errorf("other %d after adding a new kind to a full set; want 7", a.Other)
	}

	var c connFailures
	for range 1200 {
		if f := c.note("ECONNREFUSED", 12_300_000_000); f != nil {
			f.First = "connect 127.0.0.1:9000: connection refused"
		}
	}
	for range 3 {
		if f := c.note("EMFILE", 14_000_000_000); f != nil {
			f.First = "socket for 127.0.0.1:9000: too many open files"
		}
	}
	r := c.reportOf(0)
	var out strings.Builder
	r.writeSummary(&out)
	want := `connect failures: 1,203 (ECONNREFUSED ×1,200: first "connect 127.0.0.1:9000: connection refused" at 12.3 s; ` +
		`EMFILE ×3: first "socket for 127.0.0.1:9000: too many open files" at 14.0 s)` + "\n"
	if out.String() != want {
		t.Errorf("summary\n%s\nwant\n%s", out.String(), want)
	}
	for n, want := range map[uint64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q; want %q", n, got, want)
		}
	}
}
