// Command loadclient drives a hongbao server with many users, each on its own connection,
// on an exact open-loop schedule, and reconciles what it got with the server's ledger. Run
// it with -help for the flags; the work is in package loadclient.
//
// loadclient merge [-o FILE] REPORT... sums the -report files of processes that ran one
// load together, their latencies merged from their buckets (loadclient.MergeReports), and
// prints the summary (and writes the merged report to FILE).
package main

import (
	"context"
	"encoding/json"
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
	if len(args) > 0 && args[0] == "merge" {
		return merge(args[1:])
	}
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

// merge is the merge subcommand.
func merge(args []string) int {
	fs := flag.NewFlagSet("loadclient merge", flag.ContinueOnError)
	out := fs.String("o", "", "write the merged report to this `file` (JSON, as -report)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: loadclient merge [-o FILE] REPORT...\n\nSums the -report files of load clients that ran one load together; latencies merge from their buckets, so the p99 is of every request.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	var rs []*loadclient.Report
	for _, path := range fs.Args() {
		b, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadclient merge:", err)
			return 1
		}
		r := new(loadclient.Report)
		if err := json.Unmarshal(b, r); err != nil {
			fmt.Fprintf(os.Stderr, "loadclient merge: %s: %v\n", path, err)
			return 1
		}
		rs = append(rs, r)
	}
	m, err := loadclient.MergeReports(rs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadclient merge:", err)
		return 1
	}
	m.WriteSummary(os.Stdout)
	if *out != "" {
		if err := m.WriteJSON(*out); err != nil {
			fmt.Fprintln(os.Stderr, "loadclient merge:", err)
			return 1
		}
	}
	return 0
}
