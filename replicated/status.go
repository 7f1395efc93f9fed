package replicated

import (
	"time"

	"github.com/hongbao-io/hongbao/placement"
)

// What GET /cluster shows of the replicated SETs on this gateway.

// Moves are the moves in flight on this gateway, both ways.
func (r *SETs) Moves() []MoveStatus {
	r.pmu.Lock()
	sets := r.pm.Sets()
	r.pmu.Unlock()
	out := []MoveStatus{}
	for set, st := range sets {
		switch st.Role {
		case placement.MovingOut:
			out = append(out, MoveStatus{Set: set, From: r.cfg.Name, To: st.PeerName, Phase: st.Phase.String(), SinceMs: ms(time.Since(st.Since))})
		case placement.MovingIn:
			out = append(out, MoveStatus{Set: set, From: r.owners.Get(set).Name, To: r.cfg.Name, Phase: "following", SinceMs: ms(time.Since(st.Since))})
		}
	}
	return out
}

// SetStatus is a SET's state on this gateway (package placement), in GET
// /cluster.
type SetStatus struct {
	Set   int    `json:"set"`
	Role  string `json:"role"`            // away, standby, taking, serving, moving_out, moving_in
	Phase string `json:"phase,omitempty"` // within the role: starting, following, loading, preparing, cutting, switching
	// Owner and OwnerNode are the gateway of the SET's last claim heard
	// ("" and -1: none yet), Epoch the claim's.
	Owner     string `json:"owner"`
	OwnerNode int    `json:"owner_node"`
	Epoch     uint64 `json:"epoch"`
	// Tells: this gateway tells the SET's money now.
	Tells   bool    `json:"tells"`
	SinceMs float64 `json:"since_ms,omitempty"` // in its role, but away
}

// Placement are every SET's state on this gateway.
func (r *SETs) Placement() []SetStatus {
	r.pmu.Lock()
	sets := r.pm.Sets()
	lost := r.pm.Lost() != nil
	r.pmu.Unlock()
	out := make([]SetStatus, len(sets))
	for set, st := range sets {
		out[set] = SetStatus{Set: set, Role: st.Role.String(), Phase: st.Phase.String(), Owner: st.Owner.Name, OwnerNode: st.Owner.Node,
			Epoch: st.Owner.Epoch, Tells: st.Tells() && !lost}
		if st.Role != placement.Away && !st.Since.IsZero() {
			out[set].SinceMs = ms(time.Since(st.Since))
		}
	}
	return out
}

// IsMoving reports whether set is being handed over from here.
func (r *SETs) IsMoving(set int) bool {
	return r.state(set).Role == placement.MovingOut
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
