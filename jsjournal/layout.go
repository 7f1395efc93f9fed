package jsjournal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/journal"
)

// Layout is what a cluster keeps on JetStream and how it is named: one
// stream for every SET's journal, and one snapshot bucket per gateway node.
// An operator's identity creates and changes them (Provision); gateways
// only check what they find (Check) and refuse a difference, naming it.
type Layout struct {
	Prefix   string // names the stream (<prefix>_journal), its subjects (<prefix>.j.…) and the buckets
	Sets     int    // the cluster's SETs: -sets on every gateway
	Gateways int    // the node numbers 0..Gateways−1 (-node I/N: N), each with its bucket
	Replicas int    // copies JetStream keeps of each (-replicas; 1 on a single NATS server)
}

// LayoutVersion names this layout in the stream's metadata: a gateway
// refuses a stream of another (one whose subjects do not name the gateway
// that appended each message).
const LayoutVersion = "2"

// The stream's metadata keys for the layout's figures.
const (
	metaLayout   = "hongbao.layout"
	metaSets     = "hongbao.sets"
	metaGateways = "hongbao.gateways"
)

// Stream is the journal's stream.
func (l Layout) Stream() string { return l.Prefix + "_journal" }

// Bucket is gateway node's snapshot bucket: only node writes it, so an
// object in it is node's (docs/CLUSTER.md, Identities).
func (l Layout) Bucket(node int) string { return l.Prefix + "_snapshots_" + strconv.Itoa(node) }

// A message's subject names its SET, the gateway that appended it and what
// it is: <prefix>.j.<set>.<node>.r<gen> a round's records (gen: the
// generation, journal.Batch.Gen), <prefix>.j.<set>.<node>.c a claim or a
// release. Each gateway may publish on its own node's subjects only, so the
// subject proves the writer.
const (
	kindClaim  = "c"
	kindRecord = "r"
)

// RecordSubject is node's subject for set's rounds of generation gen.
func (l Layout) RecordSubject(set, node int, gen uint8) string {
	return l.Prefix + ".j." + strconv.Itoa(set) + "." + strconv.Itoa(node) + "." + kindRecord + strconv.Itoa(int(gen))
}

// ClaimSubject is node's subject for its claims and releases of set.
func (l Layout) ClaimSubject(set, node int) string {
	return l.Prefix + ".j." + strconv.Itoa(set) + "." + strconv.Itoa(node) + "." + kindClaim
}

// SetFilter covers every message of set, every gateway's: appends expect
// its last sequence (Nats-Expected-Last-Subject-Sequence-Subject), and
// replays read it.
func (l Layout) SetFilter(set int) string { return l.Prefix + ".j." + strconv.Itoa(set) + ".>" }

// ClaimsFilter covers every claim and release of every SET.
func (l Layout) ClaimsFilter() string { return l.Prefix + ".j.*.*." + kindClaim }

// parsed is what a message's subject says.
type parsed struct {
	set, node int
	claim     bool
	gen       uint8
}

// parse reads a subject of the layout; false for any other (a subject of no
// SET, a node out of range, an unknown kind): such a message was not put
// there by a gateway of this cluster.
func (l Layout) parse(subject string) (parsed, bool) {
	rest, ok := strings.CutPrefix(subject, l.Prefix+".j.")
	if !ok {
		return parsed{}, false
	}
	tok := strings.Split(rest, ".")
	if len(tok) != 3 {
		return parsed{}, false
	}
	set, err1 := strconv.Atoi(tok[0])
	node, err2 := strconv.Atoi(tok[1])
	if err1 != nil || err2 != nil || set < 0 || set >= l.Sets || node < 0 || node >= l.Gateways ||
		strconv.Itoa(set) != tok[0] || strconv.Itoa(node) != tok[1] {
		return parsed{}, false
	}
	p := parsed{set: set, node: node}
	switch {
	case tok[2] == kindClaim:
		p.claim = true
	case len(tok[2]) == 2 && tok[2][0] == kindRecord[0] && tok[2][1] >= '0' && tok[2][1] < '0'+journal.Gens:
		p.gen = tok[2][1] - '0'
	default:
		return parsed{}, false
	}
	return p, true
}

// streamConfig is the journal's stream as Provision makes it: file storage,
// the replicas asked, no limit that drops a record, no message deleted but
// by a gateway's rollup of its own subject (journal.Journal.Compact), and
// nothing else — no republishing, mirrors, sources or transforms, which
// would let the stream itself publish or take messages no gateway wrote.
func (l Layout) streamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              l.Stream(),
		Description:       "hongbao: every SET's journal, a subject per SET and gateway",
		Subjects:          []string{l.Prefix + ".j.>"},
		Storage:           jetstream.FileStorage,
		Replicas:          l.Replicas,
		Retention:         jetstream.LimitsPolicy,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxAge:            0,
		MaxMsgsPerSubject: -1,
		MaxMsgSize:        -1,
		Discard:           jetstream.DiscardNew, // full: refuse the append, never drop a record
		DenyDelete:        true,
		AllowRollup:       true, // a gateway's compaction of its own generation
		Metadata: map[string]string{metaLayout: LayoutVersion, metaSets: strconv.Itoa(l.Sets),
			metaGateways: strconv.Itoa(l.Gateways)},
	}
}

// bucketConfig is gateway node's snapshot bucket as Provision makes it.
func (l Layout) bucketConfig(node int) jetstream.ObjectStoreConfig {
	return jetstream.ObjectStoreConfig{
		Bucket:      l.Bucket(node),
		Description: fmt.Sprintf("hongbao: the snapshots gateway %d put of the SETs it ran", node),
		Storage:     jetstream.FileStorage,
		Replicas:    l.Replicas,
	}
}

// valid checks the layout's figures.
func (l Layout) valid() error {
	switch {
	case l.Prefix == "" || strings.ContainsAny(l.Prefix, ".*> "):
		return fmt.Errorf("jsjournal: prefix %q: want a single subject token", l.Prefix)
	case l.Sets < 1:
		return fmt.Errorf("jsjournal: %d SETs: want at least 1", l.Sets)
	case l.Gateways < 1:
		return fmt.Errorf("jsjournal: %d gateways: want at least 1", l.Gateways)
	case l.Replicas < 1 || l.Replicas > 5:
		return fmt.Errorf("jsjournal: %d replicas: want 1 to 5", l.Replicas)
	}
	return nil
}

// ErrLayout wraps Check's error: what JetStream holds is not the layout
// asked for.
var ErrLayout = errors.New("jsjournal: JetStream does not hold the layout asked for")

// Check compares what JetStream holds with l: the journal's stream and
// every gateway's bucket, each setting that matters. It names every
// difference (wrapping ErrLayout), and what is missing; it changes nothing.
func Check(ctx context.Context, js jetstream.JetStream, l Layout) error {
	if err := l.valid(); err != nil {
		return err
	}
	var diffs []string
	st, err := js.Stream(ctx, l.Stream())
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		diffs = append(diffs, fmt.Sprintf("stream %s: missing", l.Stream()))
	case err != nil:
		return fmt.Errorf("jsjournal: reading stream %s: %w", l.Stream(), err)
	default:
		diffs = append(diffs, streamDiffs(l, st.CachedInfo().Config)...)
	}
	for node := range l.Gateways {
		name := "OBJ_" + l.Bucket(node)
		st, err := js.Stream(ctx, name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			diffs = append(diffs, fmt.Sprintf("bucket %s: missing", l.Bucket(node)))
		case err != nil:
			return fmt.Errorf("jsjournal: reading bucket %s: %w", l.Bucket(node), err)
		default:
			diffs = append(diffs, bucketDiffs(l, node, st.CachedInfo().Config)...)
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%w (-sets %d, %d gateways, -replicas %d): %s; an operator's identity provisions it: jsadmin provision",
			ErrLayout, l.Sets, l.Gateways, l.Replicas, strings.Join(diffs, "; "))
	}
	return nil
}

// streamDiffs are the journal stream's settings that differ from l's.
func streamDiffs(l Layout, got jetstream.StreamConfig) []string {
	want := l.streamConfig()
	var d []string
	diff := func(what string, got, want any) {
		d = append(d, fmt.Sprintf("stream %s: %s is %v, want %v", l.Stream(), what, got, want))
	}
	if !slices.Equal(got.Subjects, want.Subjects) {
		diff("subjects", got.Subjects, want.Subjects)
	}
	if got.Storage != want.Storage {
		diff("storage", got.Storage, want.Storage)
	}
	if got.Replicas != want.Replicas {
		diff("replicas", got.Replicas, want.Replicas)
	}
	if got.Retention != want.Retention {
		diff("retention", got.Retention, want.Retention)
	}
	if got.MaxMsgs != want.MaxMsgs || got.MaxBytes != want.MaxBytes || got.MaxAge != want.MaxAge ||
		got.MaxMsgsPerSubject != want.MaxMsgsPerSubject || got.MaxMsgSize != want.MaxMsgSize {
		diff("limits (max msgs, bytes, age, msgs per subject, msg size)",
			[]any{got.MaxMsgs, got.MaxBytes, got.MaxAge, got.MaxMsgsPerSubject, got.MaxMsgSize},
			[]any{want.MaxMsgs, want.MaxBytes, want.MaxAge, want.MaxMsgsPerSubject, want.MaxMsgSize})
	}
	if got.Discard != want.Discard {
		diff("discard", got.Discard, want.Discard)
	}
	if got.DenyDelete != want.DenyDelete || got.AllowRollup != want.AllowRollup || got.Sealed {
		diff("deny delete, allow rollup, sealed", []bool{got.DenyDelete, got.AllowRollup, got.Sealed}, []bool{want.DenyDelete, want.AllowRollup, false})
	}
	if got.RePublish != nil {
		diff("republish", fmt.Sprintf("%s → %s", got.RePublish.Source, got.RePublish.Destination), "none: the stream would publish on gateways' subjects")
	}
	if got.Mirror != nil || len(got.Sources) > 0 || got.SubjectTransform != nil {
		diff("mirror, sources or subject transform", "set", "none: the stream would hold messages no gateway appended")
	}
	for _, k := range []string{metaLayout, metaSets, metaGateways} {
		if got.Metadata[k] != want.Metadata[k] {
			diff("metadata "+k, strconv.Quote(got.Metadata[k]), strconv.Quote(want.Metadata[k]))
		}
	}
	return d
}

// bucketDiffs are node's bucket's settings that differ from l's.
func bucketDiffs(l Layout, node int, got jetstream.StreamConfig) []string {
	var d []string
	name := l.Bucket(node)
	if got.Storage != jetstream.FileStorage {
		d = append(d, fmt.Sprintf("bucket %s: storage is %v, want file", name, got.Storage))
	}
	if got.Replicas != l.Replicas {
		d = append(d, fmt.Sprintf("bucket %s: replicas is %d, want %d", name, got.Replicas, l.Replicas))
	}
	if got.RePublish != nil || got.Mirror != nil || len(got.Sources) > 0 || got.SubjectTransform != nil || got.Sealed {
		d = append(d, fmt.Sprintf("bucket %s: republish, mirror, sources, a subject transform or sealed: want none", name))
	}
	return d
}

// Provision makes JetStream hold l, with an operator's identity: it creates
// what is missing and, with update, changes what differs where JetStream
// can (the replicas, the limits, the metadata; not the storage) — a change
// every gateway of the cluster then sees at its next start. Without update
// a difference is an error, as for Check. It returns what it did, a line
// each.
func Provision(ctx context.Context, js jetstream.JetStream, l Layout, update bool) ([]string, error) {
	if err := l.valid(); err != nil {
		return nil, err
	}
	var did []string
	cfg := l.streamConfig()
	st, err := js.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			return did, fmt.Errorf("jsjournal: creating stream %s: %w", cfg.Name, err)
		}
		did = append(did, fmt.Sprintf("stream %s: created (%d SETs, %d gateways, %d replicas)", cfg.Name, l.Sets, l.Gateways, l.Replicas))
	case err != nil:
		return did, fmt.Errorf("jsjournal: reading stream %s: %w", cfg.Name, err)
	default:
		if d := streamDiffs(l, st.CachedInfo().Config); len(d) > 0 {
			if !update {
				return did, fmt.Errorf("%w: %s (jsadmin provision -update changes it)", ErrLayout, strings.Join(d, "; "))
			}
			got := st.CachedInfo().Config
			if got.Metadata[metaSets] != "" && got.Metadata[metaSets] != cfg.Metadata[metaSets] {
				return did, fmt.Errorf("%w: stream %s holds the journals of %s SETs, not %d: a cluster's -sets cannot change", ErrLayout, cfg.Name, got.Metadata[metaSets], l.Sets)
			}
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				return did, fmt.Errorf("jsjournal: updating stream %s: %w", cfg.Name, err)
			}
			did = append(did, fmt.Sprintf("stream %s: updated: %s", cfg.Name, strings.Join(d, "; ")))
		}
	}
	for node := range l.Gateways {
		bc := l.bucketConfig(node)
		st, err := js.Stream(ctx, "OBJ_"+bc.Bucket)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			if _, err := js.CreateObjectStore(ctx, bc); err != nil {
				return did, fmt.Errorf("jsjournal: creating bucket %s: %w", bc.Bucket, err)
			}
			did = append(did, fmt.Sprintf("bucket %s: created", bc.Bucket))
		case err != nil:
			return did, fmt.Errorf("jsjournal: reading bucket %s: %w", bc.Bucket, err)
		default:
			if d := bucketDiffs(l, node, st.CachedInfo().Config); len(d) > 0 {
				if !update {
					return did, fmt.Errorf("%w: %s (jsadmin provision -update changes it)", ErrLayout, strings.Join(d, "; "))
				}
				if _, err := js.UpdateObjectStore(ctx, bc); err != nil {
					return did, fmt.Errorf("jsjournal: updating bucket %s: %w", bc.Bucket, err)
				}
				did = append(did, fmt.Sprintf("bucket %s: updated: %s", bc.Bucket, strings.Join(d, "; ")))
			}
		}
	}
	return did, nil
}
