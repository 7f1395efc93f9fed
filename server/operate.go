package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hongbao-io/hongbao/admin"
	"github.com/hongbao-io/hongbao/campaign"
)

// cancelCampaign serves DELETE /campaigns/{id}: 200 with the cancelled
// campaign's status (again for one already cancelled), 404 for an id never
// started or forgotten, 409 for a campaign that dealt everything.
func (s *Server) cancelCampaign(w http.ResponseWriter, r *http.Request) {
	v := r.PathValue("id")
	id, err := strconv.Atoi(v)
	if err != nil || id < 1 {
		admin.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("id=%q: not a campaign id (a whole number from 1)", v)})
		return
	}
	if s.camps == nil {
		admin.WriteJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no campaign %d: no campaigns with -pipeline=none", id)})
		return
	}
	st, err := s.camps.Cancel(id)
	if s.parts != nil {
		s.parts.Cancel(id) // whatever the state of this gateway's part
	}
	switch {
	case errors.Is(err, campaign.ErrNotFound):
		admin.WriteJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no campaign %d: never started, or finished before the last %d", id, campaign.DefaultKeepFinished)})
	case errors.Is(err, campaign.ErrNotDurable):
		admin.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
	case errors.Is(err, campaign.ErrFinished):
		admin.WriteJSON(w, http.StatusConflict, map[string]any{"error": fmt.Sprintf("campaign %d already finished: every envelope was dealt", id), "campaign": st})
	default:
		s.log.Info("campaign cancelled", "id", id, "dealt", st.Dealt, "total", st.Total)
		admin.WriteJSON(w, http.StatusOK, st)
	}
}

// refuseCampaign answers the campaign.Runner.Start errors that are not a bad
// parameter, and reports whether err was one.
func (s *Server) refuseCampaign(w http.ResponseWriter, err error) bool {
	var tooMany *campaign.TooManyError
	switch {
	case errors.As(err, &tooMany):
		admin.WriteJSON(w, http.StatusTooManyRequests, map[string]any{"error": err.Error(), "max_campaigns": tooMany.Max})
	case errors.Is(err, campaign.ErrClosed), errors.Is(err, campaign.ErrNotDurable):
		admin.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
	default:
		return false
	}
	return true
}

// serveHealth serves GET /healthz: 200 {"status":"ok"} while the server
// serves and can make money durable, else 503
// {"status":"unavailable","reason":…}.
func (s *Server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	if reason := s.unhealthy(); reason != "" {
		admin.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": reason})
		return
	}
	admin.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// unhealthy says why the server does not serve, or "".
func (s *Server) unhealthy() string {
	if s.stopping.Load() {
		return "shutting down"
	}
	if s.node != nil && s.node.Conflict() {
		return "another gateway of the cluster announces this one's node number (-node): stop one of them"
	}
	if why := s.repl.LostReason(); why != "" {
		return "this gateway lost a SET it ran and is stopping: " + why
	}
	if s.repl.Fenced() {
		return "cut off from NATS: this gateway may have lost its SETs, and serves none of them until it can show they are still its own"
	}
	if s.repl != nil && s.bus != nil && s.bus.Stalled() {
		return fmt.Sprintf("JetStream stalled: a journal round has waited %v; money requests are answered overloaded until it is acknowledged", s.repl.Stalled().Round(time.Millisecond))
	}
	if s.repl != nil && !s.repl.Connected() {
		return "JetStream unreachable: money answers wait for their journal round's acknowledgement"
	}
	if err := s.journal.Err(); err != nil {
		return fmt.Sprintf("the journal cannot make money durable, so none is handed out: %v", err)
	}
	if s.bus != nil {
		for _, i := range s.bus.Local() {
			if err := s.bus.Ring(i).Err(); err != nil {
				return fmt.Sprintf("SET %d stopped: a stage failed: %v", i, err)
			}
		}
	}
	return ""
}

// shakeTaken is the shake envelopes taken from SET set's pool and not given
// back, for the campaigns' pool budget. Returned is read before Popped, so
// that the difference never goes below zero.
func (s *Server) shakeTaken(set int) uint64 {
	s.setsMu.RLock()
	st := s.byIndex[set]
	s.setsMu.RUnlock()
	if st == nil {
		return 0
	}
	l := st.Ledger()
	returned := l.Shake.Returned.Load() // before popped: an envelope returned was popped first
	popped := l.Shake.Popped.Load()
	return popped - min(returned, popped)
}

// envelopesLive is the live group envelopes of the SETs, for the campaigns'
// envelope budget: the one the split stages hold SENDs to (-max-envelopes),
// which forget fully opened envelopes early to stay within it.
func (s *Server) envelopesLive() uint64 {
	var n uint64
	for _, l := range s.ledgers() {
		n += l.Split.Live.Load()
	}
	return n
}
