// Command server is the hongbao red-envelope server: one process serving the
// clients' TCP connections (docs/PROTOCOL.md) and the admin HTTP API
// (docs/ADMIN.md), alone or as a gateway of a cluster over NATS. -help lists
// its flags and their defaults; docs/OPERATING.md says how to run it. The work is
// package server's: main parses the flags, starts the server and shuts it
// down gracefully on SIGTERM or SIGINT.
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
	"github.com/hongbao-io/hongbao/server"
)

func main() {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: server [flags]\n\nThe hongbao red-envelope server: clients speak the protocol of docs/PROTOCOL.md on -listen, operators use the admin API on -admin.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	version := fs.Bool("version", false, "print the version and exit")
	opts, err := server.ParseFlags(fs, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if *version {
		fmt.Println(buildinfo.Read().Line("server"))
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(2)
	}
	log := server.NewLogger(os.Stderr, opts)
	s, err := server.New(opts, log)
	if err != nil {
		log.Error("cannot start", "err", err)
		os.Exit(1)
	}
	if err := s.Start(); err != nil {
		log.Error("cannot start", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-ctx.Done():
	case <-s.Lost(): // -journal jetstream: another gateway took over a SET this one ran
	case <-s.LeaveRequested(): // POST /cluster/drain
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
	defer cancel()
	err = s.Shutdown(sctx)
	// The final ledger, read once the rings have drained: after exit /stats
	// is gone, and this line is what a check of the whole run reads.
	ledger := s.Stats()
	if err != nil {
		log.Error("shutdown", "err", err, "ledger", ledger)
		if lost := (*server.LostError)(nil); errors.As(err, &lost) {
			os.Exit(server.ExitLost)
		}
		os.Exit(1)
	}
	log.Info("stopped", "ledger", ledger)
}
