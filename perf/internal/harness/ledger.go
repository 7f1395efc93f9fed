package harness

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// LedgerCheck is one equation a server's ledger must satisfy.
type LedgerCheck struct {
	Name  string `json:"name"`
	Left  int64  `json:"left"`
	Right int64  `json:"right"`
}

// OK reports whether the equation holds.
func (c LedgerCheck) OK() bool { return c.Left == c.Right }

func (c LedgerCheck) verdict() string {
	if c.OK() {
		return "ok"
	}
	return fmt.Sprintf("MISMATCH by %+d", c.Left-c.Right)
}

func (c LedgerCheck) String() string {
	return fmt.Sprintf("%s: %d = %d %s", c.Name, c.Left, c.Right, c.verdict())
}

// LedgerChecks returns docs/PROTOCOL.md's two invariants and, given the server's
// campaigns, that it created what they dealt. The campaign checks assume the
// load sends no SEND of its own (every group envelope is a campaign's) unless
// a SET skipped one for lack of online users, when only the counts are
// compared.
func LedgerChecks(st *Stats, camps []Campaign) []LedgerCheck {
	e := &st.Envelopes
	checks := []LedgerCheck{
		{"shake.created_amount = got_amount + pool_amount", st.Shake.CreatedAmount, st.Shake.GotAmount + st.Shake.PoolAmount},
		{"envelopes.created_amount = opened_amount + outstanding_amount", e.CreatedAmount, e.OpenedAmount + e.OutstandingAmount},
	}
	if len(camps) == 0 {
		return checks
	}
	shakeDealt, sendDealt, sendN := Dealt(camps)
	checks = append(checks, LedgerCheck{"shake campaigns' amount = shake.created_amount", shakeDealt, st.Shake.CreatedAmount})
	if e.SystemSkipped == 0 {
		checks = append(checks, LedgerCheck{"send campaigns' amount = envelopes.created_amount", sendDealt, e.CreatedAmount})
	}
	return append(checks, LedgerCheck{"send campaigns' envelopes = created + skipped", sendN, e.Created + e.SystemSkipped})
}

// Dealt sums what camps dealt: the shake campaigns' amount, the send
// campaigns' amount and their envelopes.
func Dealt(camps []Campaign) (shakeAmount, sendAmount, sendEnvelopes int64) {
	for _, c := range camps {
		switch c.Kind {
		case "shake":
			shakeAmount += int64(c.Amount)
		case "send":
			sendAmount += int64(c.Amount)
			sendEnvelopes += int64(c.Dealt)
		}
	}
	return shakeAmount, sendAmount, sendEnvelopes
}

// FailedChecks describes the checks that do not hold.
func FailedChecks(cs []LedgerCheck) []string {
	var bad []string
	for _, c := range cs {
		if c.Left != c.Right {
			bad = append(bad, fmt.Sprintf("%s: %d ≠ %d (off by %+d)", c.Name, c.Left, c.Right, c.Left-c.Right))
		}
	}
	return bad
}

// Ledger is a server's ledger and campaigns as read after a run.
type Ledger struct {
	Stats              Stats
	Campaigns          []Campaign
	RawStats, RawCamps []byte // the bodies of GET /stats and GET /campaigns
	Checks             []LedgerCheck
}

// SettledLedger reads /stats and /campaigns until the checks hold or wait
// passes: the stages may still be passing the last events of a run on.
// checks nil: LedgerChecks.
func (a *Admin) SettledLedger(wait time.Duration, checks func(*Stats, []Campaign) []LedgerCheck) (Ledger, error) {
	if checks == nil {
		checks = LedgerChecks
	}
	var l Ledger
	var err error
	Poll(wait, 50*time.Millisecond, func() error {
		if l.Stats, l.RawStats, err = a.Stats(); err != nil {
			return nil
		}
		if l.Campaigns, l.RawCamps, err = a.Campaigns(); err != nil {
			return nil
		}
		l.Checks = checks(&l.Stats, l.Campaigns)
		if len(FailedChecks(l.Checks)) > 0 {
			return errors.New("not settled")
		}
		return nil
	})
	return l, err
}

// Settle is the ledger after a run: once the load client's connections are
// gone (within wait) and, with campaigns, the campaigns done, the
// SettledLedger. The error joins what did not settle.
func (a *Admin) Settle(wait time.Duration, campaigns bool, checks func(*Stats, []Campaign) []LedgerCheck) (Ledger, error) {
	var errs []error
	if _, err := a.WaitConnections(0, false, wait); err != nil {
		errs = append(errs, fmt.Errorf("after the client left: %w", err))
	}
	if campaigns {
		errs = append(errs, a.WaitCampaigns(wait))
	}
	l, err := a.SettledLedger(2*time.Second, checks)
	return l, errors.Join(append(errs, err)...)
}

// Write writes the ledger's bodies to stats.json and campaigns.json of dir.
func (l *Ledger) Write(dir string) error {
	return errors.Join(os.WriteFile(filepath.Join(dir, "stats.json"), l.RawStats, 0o644),
		os.WriteFile(filepath.Join(dir, "campaigns.json"), l.RawCamps, 0o644))
}

// WriteChecks prints each check as a line of a table whose figures are
// width wide.
func WriteChecks(w io.Writer, cs []LedgerCheck, width int) {
	for _, c := range cs {
		fmt.Fprintf(w, "  %-62s %*d = %-*d %s\n", c.Name, width, c.Left, width, c.Right, c.verdict())
	}
}
