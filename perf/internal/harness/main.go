package harness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Main is the main function every perf tool shares: it parses the command
// line with parse (exit 2 on a bad one, 0 for -help), runs run under a
// context cancelled by SIGINT/SIGTERM and by bound (0: unbounded), and exits
// 1 with "<name>: FAILED: …" if run fails.
func Main[C any](name string, parse func(*flag.FlagSet, []string) (C, error),
	bound func(C) time.Duration, run func(context.Context, C) error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cfg, err := parse(fs, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if bound != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bound(cfg))
		defer cancel()
	}
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "%s: FAILED: %v\n", name, err)
		stop()
		os.Exit(1)
	}
}
