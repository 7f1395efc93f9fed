package server

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/campaign"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/set"
	"github.com/hongbao-io/hongbao/stages"
)

// dataDir is the -data directory, locked for this process: two servers
// appending to one journal would interleave their records. The lock is on
// the directory itself, which cannot be deleted while it holds the journal,
// unlike a lock file.
type dataDir struct {
	path string
	fd   int
	snap loadedSnapshot // the newest snapshot, read before the journal opens
}

func lockDataDir(path string) (*dataDir, error) {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, fmt.Errorf("-data %s: %w", path, err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("-data %s: %w", path, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("-data %s: locked by another server (%w): each server needs its own data directory", path, err)
	}
	return &dataDir{path: path, fd: fd}, nil
}

func (d *dataDir) unlock() {
	if d != nil {
		unix.Close(d.fd) // closing the descriptor releases the flock
	}
}

// openJournal opens the journal under -data, unless -journal off: from the
// newest snapshot's segment on, checking its segments against each other
// and the checkpoint. A torn tail is cut and logged; damage stops the start,
// or with -journal-repair is cut, kept beside the journal and logged.
func (s *Server) openJournal() error {
	if s.opts.Journal == "off" {
		return nil
	}
	d, err := lockDataDir(s.opts.Data)
	if err != nil {
		return err
	}
	if d.snap, err = loadSnapshot(s.snapshotDir(), s.opts.Sets); err != nil {
		d.unlock()
		return err
	}
	j, err := journal.Open(s.journalHooks(journal.Options{
		Dir:        filepath.Join(d.path, "journal"),
		Sets:       s.opts.Sets,
		Create:     s.opts.JournalCreate,
		RoundEvery: s.opts.JournalRound,
		Base:       d.snap.segment,
		Repair:     s.opts.JournalRepair,
	}))
	if err != nil {
		d.unlock()
		if d.snap.path != "" {
			return fmt.Errorf("%w (the newest snapshot: %s)", err, d.snap.path)
		}
		return err
	}
	for _, c := range j.Cuts() {
		args := []any{"file", c.File, "offset", c.Offset, "bytes", c.Bytes, "records", c.Records, "round", c.Round, "kept", c.Kept, "why", c.Why}
		if c.Torn {
			s.log.Warn("journal: torn tail cut (the end of the last round, past the checkpoint: what a crash interrupts before its sync)", args...)
		} else {
			s.log.Error("journal repaired (-journal-repair): cut; what it held is lost to this start and kept beside the journal", args...)
		}
	}
	s.journal, s.dataDir = j, d
	return nil
}

// journalHooks sets what the journal tells the server, in either mode.
func (s *Server) journalHooks(o journal.Options) journal.Options {
	o.OnDurable = func() {
		if s.bus != nil {
			s.bus.Tick() // the SETs whose egress holds money answers look again
		}
	}
	o.OnFail = func(err error) {
		s.log.Error("journal failed: no money is handed out any more (SHAKE answers 2, SEND and OPEN overloaded); /healthz answers 503", "err", err)
	}
	return o
}

// journalCloseWait bounds a gateway's wait, at its stop, for its last
// journal rounds' acknowledgements.
const journalCloseWait = 5 * time.Second

func (s *Server) closeJournal() error {
	var err error
	j := s.journal
	if j != nil {
		if s.repl != nil {
			// Its last rounds wait for JetStream at most journalCloseWait:
			// cut off or stalled, not at all — their fate is JetStream's to
			// tell, which cannot now, and the others read it.
			if s.repl.Fenced() || s.bus.Stalled() {
				s.repl.StopStore()
			} else {
				t := time.AfterFunc(journalCloseWait, s.repl.StopStore)
				defer t.Stop()
			}
		}
		err = j.Close() // an unstarted one only closes its checkpoint file
		if j.Failed() {
			err = nil // logged when it happened (OnFail); /healthz said so since
		}
		s.journal = nil
	}
	if s.parts != nil && s.parts.Registry != nil {
		s.parts.Registry.Close()
	}
	if s.repl != nil {
		if s.stopping.Load() && j != nil {
			s.repl.Release(j) // its last rounds are durable: the others take over at once
		}
		s.repl.Close()
	}
	s.dataDir.unlock()
	s.dataDir = nil
	return err
}

// recover loads the latest snapshot, replays the journal after it into the
// SETs and the campaign runner, then starts the journal's writer: before any
// client or admin request is served.
func (s *Server) recover() error {
	if s.journal == nil {
		for _, st := range s.allSets() {
			s.camps.Adopt(st.Index(), st.Campaigns())
		}
		return nil
	}
	start := time.Now()
	now := start.UnixNano()
	s.camps.Journal(s.journal.Producer()) // after the SETs' producers: its id is the same at every start
	rc := campaign.NewRecovered()
	snap := s.dataDir.snap
	sets := s.allSets()
	marked := make([]uint16, 0, len(snap.parts))
	for pid, data := range snap.parts {
		marked = append(marked, pid)
		claimed := false
		for _, st := range sets {
			ok, err := st.Load(pid, data, now)
			if err != nil {
				return fmt.Errorf("recovering from %s: %w", snap.path, err)
			}
			claimed = claimed || ok
		}
		if !claimed {
			if int(pid) != s.journal.Producers()-1 {
				return fmt.Errorf("recovering from %s: a part of journal producer %d, which this server does not have", snap.path, pid)
			}
			if err := rc.Load(data); err != nil {
				return fmt.Errorf("recovering from %s: %w", snap.path, err)
			}
		}
	}
	s.snapID = snap.id
	records := 0
	slices.Sort(marked)
	err := set.Replay(s.journal, journal.From{ID: snap.id, Segment: snap.segment, Marked: marked}, sets, now, func(r journal.Record) error {
		records++
		return rc.Apply(r)
	})
	if err != nil {
		return fmt.Errorf("recovering from %s: %w", s.opts.Data, err)
	}
	if r := s.journal.Remarked(); len(r) > 0 {
		s.log.Error("journal repaired (-journal-repair): the rounds holding these producers' snapshot marks were cut; their state is the snapshot's, marked again",
			"snapshot", snap.path, "producers", r)
	}
	if err := s.camps.Restore(rc); err != nil {
		return fmt.Errorf("recovering from %s: %w", s.opts.Data, err)
	}
	for _, st := range sets {
		s.camps.Adopt(st.Index(), st.Campaigns())
	}
	if err := s.journal.Start(); err != nil {
		return err
	}
	for _, st := range sets {
		st.Snapshots(func(p stages.Part) { s.snapParts <- p })
	}
	st := ledger.Sum(s.ledgers())
	took := time.Since(start)
	s.recoveryTime = took
	s.log.Info("recovered", "data", s.opts.Data, "snapshot", snap.path, "records_replayed", records, "took", took.Round(time.Microsecond),
		"pool_envelopes", st.Shake.Pool, "pool_fen", st.Shake.PoolAmount, "shake_got_fen", st.Shake.GotAmount,
		"group_envelopes_held", st.Envelopes.Held, "group_live_fen", st.Envelopes.LiveAmount,
		"opened_fen", st.Envelopes.OpenedAmount, "campaigns", rc.Campaigns())
	if err := st.Check(); err != nil {
		return fmt.Errorf("recovered ledger does not balance: %w", err)
	}
	return nil
}
