// Package buildinfo says what a binary was built from: the module version,
// the VCS revision and the Go version, as the binaries' -version flag and
// the server's hongbao_build_info metric report them. It reads only the Go
// runtime's build data and knows nothing of the server.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info is what a binary was built from.
type Info struct {
	Version   string // module version, or "devel" for a build outside the module system's versioning
	Revision  string // VCS revision, "-dirty" appended when the work tree had changes; "unknown" without VCS data
	GoVersion string // the toolchain, such as go1.26.8
}

// Read returns the running binary's Info.
func Read() Info {
	i := Info{Version: "devel", Revision: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		i.Version = v
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified {
		i.Revision += "-dirty"
	}
	return i
}

// Line is the -version line of program: "hongbao server v1.2.3 (abc123, go1.26.8)".
func (i Info) Line(program string) string {
	return fmt.Sprintf("hongbao %s %s (%s, %s)", program, i.Version, i.Revision, i.GoVersion)
}
