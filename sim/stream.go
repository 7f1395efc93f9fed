package sim

// stream is the model of the JetStream semantics the gateways rely on
// (package jsjournal): each SET's messages in order, an append that names
// the SET's last message it expects and is refused after any other, and
// the claims — a SET's owner is its last claim, which supersedes the claim
// it names or nothing. A SET's sequence here counts its own messages: the
// real stream's sequences are global, but an append's condition is per
// SET, which is all the model needs.
type stream struct {
	log   [][]msg  // each SET's messages
	claim []claim  // each SET's last claim
	down  duration // no appends land before it: a leader's election
	// noFence, in the tests that show the checks can fail: appends land
	// whatever they expect.
	noFence bool
}

// msg is one message of a SET: a claim (or a release: Node -1) or a round
// of money answers.
type msg struct {
	claim   bool
	node    int
	epoch   uint64
	answers []answer
}

// answer is one money answer of a round: a request id and its amount.
type answer struct {
	id     uint64
	amount int64
}

// claim is a SET's last claim: its owner (-1: none, or released) and epoch.
type claim struct {
	node  int
	epoch uint64
}

func newStream(sets int) *stream {
	s := &stream{log: make([][]msg, sets), claim: make([]claim, sets)}
	for i := range s.claim {
		s.claim[i].node = -1
	}
	return s
}

// last is the sequence of set's last message (0: none).
func (s *stream) last(set int) uint64 { return uint64(len(s.log[set])) }

// appendRound appends node's round of answers to set after message
// expect, at epoch; false if another message came after it (fenced).
func (s *stream) appendRound(set, node int, epoch, expect uint64, answers []answer) (uint64, bool) {
	if s.last(set) != expect && !s.noFence {
		return 0, false
	}
	s.log[set] = append(s.log[set], msg{node: node, epoch: epoch, answers: answers})
	return s.last(set), true
}

// appendClaim claims set for node (-1: a release) if its last claim is at
// epoch was and, when after is not 0, its last message is after; the new
// claim's epoch and sequence.
func (s *stream) appendClaim(set, node int, was, after uint64) (claim, uint64, bool) {
	if s.claim[set].epoch != was || after != 0 && s.last(set) != after {
		return claim{}, 0, false
	}
	c := claim{node: node, epoch: was + 1}
	s.claim[set] = c
	s.log[set] = append(s.log[set], msg{claim: true, node: node, epoch: c.epoch})
	return c, s.last(set), true
}

// state replays set up to its last message: the answers of the rounds its
// owners appended, each under the claim it came after.
func (s *stream) state(set int) map[uint64]int64 {
	out := make(map[uint64]int64)
	for _, m := range s.log[set] {
		for _, a := range m.answers {
			out[a.id] = a.amount
		}
	}
	return out
}
