// Command perf is `make perf`: the seed scenario end to end on loopback —
// connect, a steady phase with a shake campaign, a phase with system group
// envelopes, a phase at a higher QPS — with the server's profiles, GC trace,
// RSS and metrics captured and rendered into flame graphs, charts and a
// report under perf/out/<time>/. -help lists the flags and the steps, and
// the run's commands.txt has each step as a command to run by hand;
// README.md beside this file lists the outputs.
//
// Run it from the module root after make build.
package main

import (
	"context"
	"os"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

func main() {
	// Bounded whatever happens: the phases, the client's grace and
	// reconciliation, the server's drain, the rendering.
	bound := func(c config) time.Duration { return c.length() + 3*time.Minute }
	harness.Main("perf", parseFlags, bound, func(ctx context.Context, c config) error {
		return run(ctx, c, os.Stdout, os.Stderr)
	})
}
