package buildinfo

import (
	"runtime"
	"testing"
)

func TestRead(t *testing.T) {
	i := Read()
	if i.Version == "" || i.Revision == "" || i.GoVersion != runtime.Version() {
		t.Fatalf("Read() = %+v; want every field set, GoVersion %s", i, runtime.Version())
	}
	line := i.Line("server")
	if want := "hongbao server " + i.Version + " (" + i.Revision + ", " + i.GoVersion + ")"; line != want {
		t.Fatalf("Line = %q; want %q", line, want)
	}
}
