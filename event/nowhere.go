package event

import (
	"errors"

	"github.com/hongbao-io/hongbao/ring"
)

// ErrNoOwner is Nowhere's Claim error: the SET has no owner at the moment,
// and an event that must not be refused is sent again later, or to the
// SET's next owner, by whoever keeps it.
var ErrNoOwner = errors.New("event: the SET has no owner at the moment")

// Nowhere is the route of a SET no gateway runs at the moment (between
// owners, where SETs fail over): it takes no event. A request for it is
// answered "overloaded", as for a full ring; a producer that would wait for
// room gets ErrNoOwner at once rather than wait.
type Nowhere struct{ size int }

// NewNowhere returns a Nowhere that claims to have size slots, the size of
// the rings it stands in for.
func NewNowhere(size int) *Nowhere { return &Nowhere{size: size} }

var _ Transport = (*Nowhere)(nil)

func (n *Nowhere) Size() int                               { return n.size }
func (n *Nowhere) Claim(int) (int64, error)                { return 0, ErrNoOwner }
func (n *Nowhere) TryClaim(int) (int64, error)             { return 0, ring.ErrFull }
func (n *Nowhere) TryClaimLeaving(int, int) (int64, error) { return 0, ring.ErrFull }
func (n *Nowhere) At(int64) *Event                         { panic("BUG: event: an event claimed from Nowhere") }
func (n *Nowhere) Publish(int64, int64)                    { panic("BUG: event: an event published to Nowhere") }
func (n *Nowhere) Start() error                            { return nil }
func (n *Nowhere) Close() error                            { return nil }
func (n *Nowhere) Err() error                              { return nil }
func (n *Nowhere) Len() int                                { return 0 }
