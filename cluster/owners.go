package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Where SETs fail over (the journal on JetStream), which gateway runs a SET
// is no rule of arithmetic but a record: one key per SET in a JetStream KV
// bucket, changed only by compare-and-set on its revision, its epoch one more
// at every change of owner. A gateway claims a SET by updating the key from
// the revision it read; of two that race, one wins. The record decides who
// may serve the SET; the journal's conditional appends make that hold even
// for a gateway that has not yet seen it lose (see jsjournal): the winner's
// first append, its claim, refuses every later append of the loser.

// Claim is the record of a SET's owner.
type Claim struct {
	Node  int    `json:"node"`  // the gateway's node number
	Name  string `json:"name"`  // its name, for the operator
	Epoch uint64 `json:"epoch"` // one more at every change of owner
	At    int64  `json:"at"`    // unix ns of the claim
}

// Owners is this gateway's view of the ownership records: every SET's
// claim, kept from the bucket's watch. Safe for concurrent use; Of is one
// atomic load.
type Owners struct {
	kv   jetstream.KeyValue
	sets int

	owner  []atomic.Int32 // per SET: its owner's node, -1 none
	former []atomic.Int32 // per SET: the node that ran it before, -1 none
	mu     sync.Mutex
	claim  []Claim  // per SET, under mu
	rev    []uint64 // the revision of each SET's record, under mu (0: none)
	ready  chan struct{}
	watch  jetstream.KeyWatcher
	// OnChange runs on the watch's goroutine after a SET's record changed,
	// with the record before and after.
	onChange func(set int, was, now Claim)
}

// ErrClaimLost is Claim's error when another gateway changed the SET's
// record first.
var ErrClaimLost = errors.New("cluster: another gateway claimed the SET first")

// ErrShape is OpenOwners' error when the bucket holds a cluster of another
// number of SETs.
var ErrShape = errors.New("cluster: the ownership records are of another number of SETs")

const configKey = "config"

// OpenOwners opens (making it if need be) the ownership bucket of a cluster
// of sets SETs, replicated replicas times, and starts watching it. The
// first gateway writes the cluster's number of SETs; one of another number
// is refused (ErrShape). onChange may be nil.
func OpenOwners(ctx context.Context, js jetstream.JetStream, bucket string, sets, replicas int, onChange func(set int, was, now Claim)) (*Owners, error) {
	// Created, or opened as it is; one of another configuration (another
	// -replicas) is refused rather than changed for every gateway.
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 8, Replicas: replicas,
		Storage: jetstream.FileStorage, Description: "hongbao: the owner of each SET"})
	if errors.Is(err, jetstream.ErrBucketExists) {
		return nil, fmt.Errorf("cluster: the ownership bucket %s exists with another configuration (another -replicas?): every gateway of a cluster asks the same: %w", bucket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: the ownership bucket %s: %w", bucket, err)
	}
	cfg, _ := json.Marshal(struct {
		Sets int `json:"sets"`
	}{sets})
	if _, err := kv.Create(ctx, configKey, cfg); errors.Is(err, jetstream.ErrKeyExists) {
		e, err := kv.Get(ctx, configKey)
		// Created a moment ago by a gateway starting alongside: a read
		// served by a replica that has not applied it yet misses it.
		for wait := 10 * time.Millisecond; errors.Is(err, jetstream.ErrKeyNotFound) && wait < 5*time.Second; wait *= 2 {
			time.Sleep(wait)
			e, err = kv.Get(ctx, configKey)
		}
		if err != nil {
			return nil, fmt.Errorf("cluster: the ownership bucket %s: %w", bucket, err)
		}
		var c struct {
			Sets int `json:"sets"`
		}
		if json.Unmarshal(e.Value(), &c) != nil || c.Sets != sets {
			return nil, fmt.Errorf("%w: the cluster has -sets %d, this gateway %d", ErrShape, c.Sets, sets)
		}
	} else if err != nil {
		return nil, fmt.Errorf("cluster: the ownership bucket %s: %w", bucket, err)
	}
	o := &Owners{kv: kv, sets: sets, owner: make([]atomic.Int32, sets), former: make([]atomic.Int32, sets), claim: make([]Claim, sets), rev: make([]uint64, sets),
		ready: make(chan struct{}), onChange: onChange}
	for s := range o.owner {
		o.owner[s].Store(-1)
		o.former[s].Store(-1)
		o.claim[s].Node = -1
	}
	// Not ctx: the watch lives until Close, and a subscription's context
	// ends it.
	if o.watch, err = kv.Watch(context.Background(), "set.*"); err != nil {
		return nil, fmt.Errorf("cluster: watching %s: %w", bucket, err)
	}
	go o.follow()
	select {
	case <-o.ready:
	case <-ctx.Done():
		o.watch.Stop()
		return nil, fmt.Errorf("cluster: reading %s: %w", bucket, ctx.Err())
	}
	return o, nil
}

func setKey(set int) string { return "set." + strconv.Itoa(set) }

// follow applies the watch's updates until it stops; a nil entry marks the
// end of what the bucket held when the watch began.
func (o *Owners) follow() {
	readyOnce := sync.OnceFunc(func() { close(o.ready) })
	defer readyOnce()
	for e := range o.watch.Updates() {
		if e == nil {
			readyOnce()
			continue
		}
		set, err := strconv.Atoi(e.Key()[len("set."):])
		if err != nil || set < 0 || set >= o.sets {
			continue
		}
		var c Claim
		if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &c) != nil {
			c = Claim{Node: -1}
		}
		o.mu.Lock()
		if e.Revision() <= o.rev[set] {
			o.mu.Unlock()
			continue // Claim recorded it already
		}
		was := o.claim[set]
		o.record(set, c, e.Revision())
		o.mu.Unlock()
		if o.onChange != nil && was != c {
			o.onChange(set, was, c)
		}
	}
}

// record keeps set's record c at revision rev, under mu.
func (o *Owners) record(set int, c Claim, rev uint64) {
	if was := o.claim[set].Node; was >= 0 && was != c.Node {
		o.former[set].Store(int32(was))
	}
	o.claim[set], o.rev[set] = c, rev
	o.owner[set].Store(int32(c.Node))
}

// Of returns the node that runs set, -1 for none.
func (o *Owners) Of(set int) int { return int(o.owner[set].Load()) }

// Former returns the node that ran set before its owner of the moment, -1
// for none: what it sent for the SET before it learnt is stale, not forged.
func (o *Owners) Former(set int) int { return int(o.former[set].Load()) }

// Get returns set's record and its revision (0: none yet).
func (o *Owners) Get(set int) (Claim, uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.claim[set], o.rev[set]
}

// Claim makes node (named name) the owner of set, if its record is still
// at revision rev (0: no record yet), with the epoch after the record's; it
// returns the new record. ErrClaimLost: another gateway changed it first.
func (o *Owners) Claim(ctx context.Context, set int, rev uint64, node int, name string) (Claim, error) {
	was := Claim{Node: -1}
	if rev != 0 {
		// The epoch follows the record being replaced, which this
		// gateway's view may not have caught up with yet.
		e, err := o.kv.Get(ctx, setKey(set))
		if err != nil {
			return Claim{}, fmt.Errorf("cluster: reading SET %d's owner: %w", set, err)
		}
		if e.Revision() != rev {
			return Claim{}, ErrClaimLost
		}
		if json.Unmarshal(e.Value(), &was) != nil {
			was = Claim{Node: -1}
		}
	}
	c := Claim{Node: node, Name: name, Epoch: was.Epoch + 1, At: time.Now().UnixNano()}
	b, _ := json.Marshal(c)
	var nrev uint64
	var err error
	if rev == 0 {
		nrev, err = o.kv.Create(ctx, setKey(set), b)
	} else {
		nrev, err = o.kv.Update(ctx, setKey(set), b, rev)
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || wrongRevision(err) {
			return Claim{}, ErrClaimLost
		}
		return Claim{}, fmt.Errorf("cluster: claiming SET %d: %w", set, err)
	}
	o.mu.Lock()
	if nrev > o.rev[set] {
		o.record(set, c, nrev)
	}
	o.mu.Unlock()
	if o.onChange != nil && was != c {
		o.onChange(set, was, c)
	}
	return c, nil
}

// Release hands set back, if its record still names node: no owner, the
// same epoch, so that the others claim it at once rather than once node's
// lease lapses. ErrClaimLost: the record names another gateway now.
func (o *Owners) Release(ctx context.Context, set, node int) error {
	c, rev := o.Get(set)
	if c.Node != node || rev == 0 {
		return ErrClaimLost
	}
	was := c
	c.Node, c.Name, c.At = -1, "", time.Now().UnixNano()
	b, _ := json.Marshal(c)
	nrev, err := o.kv.Update(ctx, setKey(set), b, rev)
	if err != nil {
		if wrongRevision(err) {
			return ErrClaimLost
		}
		return fmt.Errorf("cluster: releasing SET %d: %w", set, err)
	}
	o.mu.Lock()
	if nrev > o.rev[set] {
		o.record(set, c, nrev)
	}
	o.mu.Unlock()
	if o.onChange != nil {
		o.onChange(set, was, c)
	}
	return nil
}

// wrongRevision tells whether err is the bucket refusing an update made
// from a revision that is no longer the key's last.
func wrongRevision(err error) bool {
	var api jetstream.JetStreamError
	return errors.As(err, &api) && api.APIError() != nil &&
		(api.APIError().ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.APIError().ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Close stops the watch.
func (o *Owners) Close() {
	if o.watch != nil {
		o.watch.Stop()
	}
}

// Orphans assigns the SETs that need an owner — none yet, or an owner not in
// live — to the takers (the live gateways that take SETs: not one that is
// leaving), evenly: each in turn, in SET order, to the taker that runs the
// fewest then (ties to the lower node). Every gateway with the same view
// computes the same assignment, so each claims its own and they seldom
// race; when views differ for a moment, the records' compare-and-set settles
// it. It returns the orphans given to node.
func Orphans(owner, live, takers []int, node int) []int {
	if !slices.Contains(takers, node) {
		return nil
	}
	takers = slices.Sorted(slices.Values(takers))
	count := make(map[int]int, len(takers))
	for _, o := range owner {
		if slices.Contains(takers, o) {
			count[o]++
		}
	}
	var mine []int
	for set, o := range owner {
		if slices.Contains(live, o) {
			continue
		}
		best := takers[0]
		for _, n := range takers[1:] {
			if count[n] < count[best] {
				best = n
			}
		}
		count[best]++
		if best == node {
			mine = append(mine, set)
		}
	}
	return mine
}

// Standbys is what node follows while other gateways run it, to take it
// over in milliseconds should its owner die: of each other live owner's
// SETs, those Orphans would give node if that owner alone were gone. The
// SETs a death leaves are then already loaded where they are claimed.
func Standbys(owner, live, takers []int, node int) []int {
	if !slices.Contains(takers, node) {
		return nil
	}
	var out []int
	for _, gone := range live {
		if gone == node || !slices.Contains(owner, gone) {
			continue
		}
		without := func(nodes []int) []int {
			return slices.DeleteFunc(slices.Clone(nodes), func(n int) bool { return n == gone })
		}
		for _, set := range Orphans(owner, without(live), without(takers), node) {
			if owner[set] == gone {
				out = append(out, set)
			}
		}
	}
	slices.Sort(out)
	return out
}

// ToClaim is what node claims, given the SETs it runs: first those whose
// record names node but that it does not run — an earlier process of
// node's claimed them, or a move of them failed, and no other gateway takes
// them while node is live — then, if it is a taker, its share of the
// Orphans.
func ToClaim(owner []int, running []bool, live, takers []int, node int) []int {
	if !slices.Contains(live, node) {
		return nil
	}
	var mine []int
	for set, o := range owner {
		if o == node && !running[set] {
			mine = append(mine, set)
		}
	}
	return append(mine, Orphans(owner, live, takers, node)...)
}

// NextMove is the SET node should hand over next, and to whom, to even out
// the SETs over the takers: every SET of a node that is not a taker (it is
// leaving), else one of node's while it runs more than its share (the SETs
// over the takers, rounded up) and a taker runs fewer than rounded down —
// each time to the taker that runs the fewest (ties to the lower node), its
// highest-numbered SET first. Owners not in takers keep their SETs until
// they hand them over. ok is false when node has nothing to move.
func NextMove(owner, takers []int, node int) (set, to int, ok bool) {
	if len(takers) == 0 {
		return 0, 0, false
	}
	takers = slices.Sorted(slices.Values(takers))
	count := make(map[int]int, len(takers))
	mine := -1
	for s, o := range owner {
		if o >= 0 {
			count[o]++
		}
		if o == node {
			mine = s
		}
	}
	if mine < 0 {
		return 0, 0, false
	}
	to = -1
	for _, n := range takers {
		if n != node && (to < 0 || count[n] < count[to]) {
			to = n
		}
	}
	if to < 0 {
		return 0, 0, false
	}
	if slices.Contains(takers, node) {
		all := 0
		for _, n := range takers {
			all += count[n]
		}
		lo, hi := all/len(takers), (all+len(takers)-1)/len(takers)
		if count[node] <= hi || count[to] >= lo {
			return 0, 0, false
		}
	}
	return mine, to, true
}
