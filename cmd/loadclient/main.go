// Command loadclient drives a hongbao server with many users, each on its own connection,
// on an exact open-loop schedule, and reconciles what it got with the server's ledger. Run
// it with -help for the flags; the work is in package loadclient.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hongbao-io/hongbao/buildinfo"
	"github.com/hongbao-io/hongbao/loadclient"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run returns the exit code: 0 for a clean run, 1 for a failed one, 2 for a bad command line.
func run(args []string) int {
	fs := flag.NewFlagSet("loadclient", flag.ContinueOnError)
	version := fs.Bool("version", false, "print the version and exit")
	cfg, err := loadclient.ParseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if *version {
		fmt.Println(buildinfo.Read().Line("loadclient"))
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadclient:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := loadclient.Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadclient: FAILED:", err)
		return 1
	}
	return 0
}
