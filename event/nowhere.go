package event

import "hongbao/ring"

// Nowhere is the route of a SET no gateway runs at the moment (between
// owners, where SETs fail over): it takes no event. A request for it is
// answered "overloaded", as for a full ring; a producer that would wait for
// room gives up, as at a closing ring.
type Nowhere struct{ size int }

// NewNowhere returns a Nowhere that claims to have size slots, the size of
// the rings it stands in for.
func NewNowhere(size int) *Nowhere { return &Nowhere{size: size} }

var _ Transport = (*Nowhere)(nil)

func (n *Nowhere) Size() int                               { return n.size }
func (n *Nowhere) Claim(int) (int64, error)                { return 0, ring.ErrClosed }
func (n *Nowhere) TryClaim(int) (int64, error)             { return 0, ring.ErrFull }
func (n *Nowhere) TryClaimLeaving(int, int) (int64, error) { return 0, ring.ErrFull }
func (n *Nowhere) At(int64) *Event                         { panic("BUG: event: an event claimed from Nowhere") }
func (n *Nowhere) Publish(int64, int64)                    { panic("BUG: event: an event published to Nowhere") }
func (n *Nowhere) Start() error                            { return nil }
func (n *Nowhere) Close() error                            { return nil }
func (n *Nowhere) Err() error                              { return nil }
func (n *Nowhere) Len() int                                { return 0 }
