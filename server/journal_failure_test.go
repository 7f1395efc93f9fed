package server_test

import (
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// requireJournalFailedAtShutdown shuts ts down and requires the error that
// says the journal failed during the run: the exit status of a server
// whose journal failed is not 0.
func requireJournalFailedAtShutdown(t *testing.T, ts *testServer) {
	t.Helper()
	err := ts.shutdown()
	if err == nil || !strings.Contains(err.Error(), "journal failed") || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Shutdown after a journal failure: %v; want an error naming it", err)
	}
	ts.stopErr = nil // expected: the cleanup's own shutdown check passes
}

// TestJournalFailureStopsCampaigns: once the journal fails, running
// campaigns deal nothing more (nothing dealt could be made durable), and
// GET /campaigns says why.
func TestJournalFailureStopsCampaigns(t *testing.T) {
	var off atomic.Bool
	ts := startServer(t, func(o *server.Options) {
		o.JournalCreate = func(path string) (journal.File, error) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
			return syncSwitch{f, &off}, err
		}
	})
	c := ts.startCampaign("shake", "rate=1000&total=1000000&min=1&max=10")
	waitFor(t, "the campaign to deal", func() bool { return ts.campaigns()[0].Dealt > 0 })
	off.Store(true)
	alice := login(t, ts, 1) // a SHAKE whose record's sync fails
	s := alice.nextStamp()
	alice.send(proto.AppendShake(nil, s))
	alice.answer(s)
	waitFor(t, "the campaign to say it waits for the journal", func() bool {
		st := ts.campaigns()[0]
		return st.ID == c.ID && st.Waiting == "journal failed"
	})
	dealt := ts.campaigns()[0].Dealt
	time.Sleep(10 * envelope.TickInterval) // each tick would deal a tick's worth, at least one envelope
	if st := ts.campaigns()[0]; st.Dealt != dealt || st.Waiting != "journal failed" {
		t.Fatalf("after the journal failed the campaign dealt %d more (waiting %q)", st.Dealt-dealt, st.Waiting)
	}
	requireJournalFailedAtShutdown(t, ts)
}
