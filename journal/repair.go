package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Cut is a part of the journal that Open took out: a torn tail (the end of
// the last round a crash interrupted, never synced, so no answer told of
// it) or, with Options.Repair, what followed corruption or a missing file.
type Cut struct {
	File    string // the segment cut (or the file found missing or wrong)
	Offset  int64  // where the cut starts
	Bytes   int64  // bytes cut
	Records int    // records that decode in them: a lower bound when a round is damaged inside
	Round   uint64 // the first round cut (0: none)
	Torn    bool   // a torn tail; false: a repair
	Kept    string // the file the cut bytes are in now, beside the journal; "" when there were none or only zeros
	Why     string // what was wrong there
}

// Cuts is what Open cut: torn tails, and with Options.Repair what it cut or
// found missing.
func (j *Journal) Cuts() []Cut { return j.cuts }

// lose lists a cut in Cuts and counts it in the metrics.
func (j *Journal) lose(c Cut) {
	j.cuts = append(j.cuts, c)
	if c.Torn {
		j.M.TornCuts.Add(1)
	} else {
		j.M.Repairs.Add(1)
	}
	j.M.CutBytes.Add(uint64(c.Bytes))
	j.M.CutRecords.Add(uint64(c.Records))
}

// cutTorn cuts the newest segment's torn tail: its bytes kept beside it
// unless they are all zeros, the file cut (removed when its header was
// torn) and synced.
func (j *Journal) cutTorn(name string, t *tornTail) error {
	path := filepath.Join(j.o.Dir, name)
	c := Cut{File: path, Offset: t.off, Bytes: int64(len(t.b)) - t.off, Round: t.round, Torn: true, Why: t.why.Error()}
	if len(t.b) > segmentHeaderLen {
		c.Records = countRecords(t.b, max(int(t.off), segmentHeaderLen))
	}
	if slices.ContainsFunc(t.b[t.off:], func(c byte) bool { return c != 0 }) {
		kept, err := keepAside(path, t.b[t.off:])
		if err != nil {
			return err
		}
		c.Kept = kept
	}
	var err error
	if t.off == 0 {
		err = os.Remove(path)
	} else {
		err = truncate(path, t.off)
	}
	if err != nil {
		return fmt.Errorf("journal: cutting the torn tail of %s: %w", path, err)
	}
	if err := SyncDir(j.o.Dir); err != nil {
		return err
	}
	j.lose(c)
	return nil
}

// repairCut cuts names[p.at] at p.off and moves every later segment aside,
// keeping every byte in files beside the journal; it returns the segments
// left.
func (j *Journal) repairCut(names []string, p *problem) ([]string, error) {
	dir := j.o.Dir
	var ce *CorruptError
	why := p.err.Error()
	if errors.As(p.err, &ce) {
		why = ce.Err.Error()
		if errors.Is(ce.Err, ErrMissing) { // nothing of it to keep: what it held is lost
			j.lose(Cut{File: ce.File, Offset: ce.Offset, Round: p.round, Why: why})
		}
	}
	for i := p.at; i < len(names); i++ {
		path := filepath.Join(dir, names[i])
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		c := Cut{File: path, Bytes: int64(len(b)), Round: p.round, Why: why}
		if i > p.at {
			c.Why = "follows the cut at " + names[p.at]
			c.Round = 0
			if h, err := parseSegHeader(b); err == nil {
				c.Round = h.prevSeq + 1
			}
		}
		if i == p.at && p.off > 0 {
			c.Offset, c.Bytes = p.off, int64(len(b))-p.off
			if c.Kept, err = keepAside(path, b[p.off:]); err != nil {
				return nil, err
			}
			if err := truncate(path, p.off); err != nil {
				return nil, fmt.Errorf("journal: repairing %s: %w", path, err)
			}
		} else {
			if c.Kept, err = moveAside(path); err != nil {
				return nil, err
			}
		}
		if int(c.Offset) < len(b) {
			c.Records = countRecords(b, max(int(c.Offset), segmentHeaderLen))
		}
		j.lose(c)
	}
	if err := SyncDir(dir); err != nil {
		return nil, err
	}
	if p.off > 0 {
		return names[:p.at+1], nil
	}
	return names[:p.at], nil
}

// cutName is a new name beside path for what is cut from it.
func cutName(path string) string {
	name := fmt.Sprintf("%s.cut-%d", path, time.Now().Unix())
	for i := 2; ; i++ {
		if _, err := os.Lstat(name); errors.Is(err, os.ErrNotExist) {
			return name
		}
		name = fmt.Sprintf("%s.cut-%d-%d", path, time.Now().Unix(), i)
	}
}

// keepAside writes b, cut from path, to a new file beside it, synced.
func keepAside(path string, b []byte) (string, error) {
	name := cutName(path)
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		_, err = f.Write(b)
		if err == nil {
			err = f.Sync()
		}
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		return "", fmt.Errorf("journal: keeping what is cut from %s: %w", path, err)
	}
	return name, nil
}

// moveAside renames a segment out of the journal, beside it.
func moveAside(path string) (string, error) {
	name := cutName(path)
	if err := os.Rename(path, name); err != nil {
		return "", fmt.Errorf("journal: moving %s aside: %w", path, err)
	}
	return name, nil
}
