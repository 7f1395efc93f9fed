// Package parts tells a campaign to every gateway of a cluster: each
// starts it under the id the creating gateway gave, and deals the shares of
// the SETs it runs (campaign.ShareOf), which are the SETs' own state: the
// gateway that runs a SET next deals what is left of its share. Deals never
// cross.
package parts

import (
	"crypto/hmac"
	"encoding/json"
	"log/slog"

	"github.com/hongbao-io/hongbao/campaign"
	"github.com/hongbao-io/hongbao/cluster"
)

// Dealer deals campaigns by parts over the gateways of a cluster.
type Dealer struct {
	Node   *cluster.Node
	Runner *campaign.Runner // this gateway's campaigns: its parts
	Limits campaign.Limits
	Key    []byte // the admin token's key, which signs the ops; nil without one
	Log    *slog.Logger
	// Registry, where SETs fail over, keeps the ops instead of telling them
	// to the gateways up now.
	Registry *Registry
}

// campaignOp is what a gateway tells the others of a campaign.
type campaignOp struct {
	Op     string          `json:"op"` // start | cancel
	From   int             `json:"from"`
	ID     int             `json:"id"`
	Params campaign.Params `json:"params,omitzero"`
}

// sign returns op signed with key (cluster.SignedOp).
func sign(key []byte, op campaignOp) []byte {
	b, _ := json.Marshal(op)
	signed, _ := json.Marshal(cluster.SignedOp{Op: b, Proof: cluster.Proof(key, b)})
	return signed
}

// openSigned decodes a signed campaign op, or says why it is refused: it
// does not decode, or its proof does not hold under key (none needed
// without one).
func openSigned(key, data []byte) (campaignOp, string) {
	var signed cluster.SignedOp
	var op campaignOp
	if json.Unmarshal(data, &signed) != nil || json.Unmarshal(signed.Op, &op) != nil {
		return op, "a campaign message that does not decode"
	}
	if len(key) > 0 && !hmac.Equal([]byte(signed.Proof), []byte(cluster.Proof(key, signed.Op))) {
		return op, "a campaign message without the proof of this gateway's -admin-token (every gateway needs the same one)"
	}
	return op, ""
}

// broadcast tells the other gateways of op, signed.
func (d *Dealer) broadcast(op campaignOp) error {
	return d.Node.Broadcast("campaign", sign(d.Key, op))
}

// open returns the campaign op gateway from sent in data, or why
// it is refused: a proof that does not hold under this gateway's admin
// token, an op naming another sender, an id not of the sender's.
func (d *Dealer) open(from int, data []byte) (campaignOp, string) {
	op, why := openSigned(d.Key, data)
	if why != "" {
		return op, why
	}
	if o := d.Node.Options(); op.From != from || op.ID <= 0 || op.ID%o.Nodes != from {
		return op, "a campaign message naming another gateway, or an id not of its sender's"
	}
	return op, ""
}

// Start starts campaign p here and tells the other gateways to start it:
// each deals the shares of the SETs it runs.
func (d *Dealer) Start(p campaign.Params) (campaign.Status, error) {
	if d.Registry != nil {
		return d.Registry.Start(p)
	}
	o := d.Node.Options()
	if err := p.Validate(d.Limits); err != nil {
		return campaign.Status{}, err
	}
	id := d.Runner.ReserveID()
	if _, err := d.Runner.StartAs(id, p); err != nil {
		return campaign.Status{}, err
	}
	if err := d.broadcast(campaignOp{Op: "start", From: o.Node, ID: id, Params: p}); err != nil {
		d.Log.Error("cluster: the other gateways were not told of a campaign: only the shares of this gateway's SETs are dealt", "id", id, "err", err)
	}
	st, _ := d.Runner.Status(id)
	return st, nil
}

// Cancel tells the other gateways to cancel their part of id.
func (d *Dealer) Cancel(id int) {
	if d.Registry != nil {
		d.Registry.Cancel(id)
		return
	}
	if err := d.broadcast(campaignOp{Op: "cancel", From: d.Node.Options().Node, ID: id}); err != nil {
		d.Log.Error("cluster: the other gateways were not told to cancel a campaign", "id", id, "err", err)
	}
}

// Serve starts or cancels this gateway's part of a campaign another
// gateway created or cancelled: the server serves it on the cluster's
// "campaign" subject.
func (d *Dealer) Serve(from int, data []byte) []byte {
	op, why := d.open(from, data)
	if why == "" && d.Registry != nil {
		why = "a campaign told over core NATS where the journal's stream keeps them (-journal jetstream)"
	}
	if why != "" {
		d.Node.Refused(from, why)
		return nil
	}
	switch op.Op {
	case "start":
		if _, err := d.Runner.StartAs(op.ID, op.Params); err != nil {
			d.Log.Error("cluster: a campaign was not started here: the shares of this gateway's SETs are not dealt", "id", op.ID, "from", op.From, "err", err)
			return nil
		}
		d.Log.Info("campaign started", "id", op.ID, "from", op.From, "kind", op.Params.Kind, "rate", op.Params.Rate, "total", op.Params.Total)
	case "cancel":
		if _, err := d.Runner.Cancel(op.ID); err == nil {
			d.Log.Info("campaign cancelled", "id", op.ID, "from", op.From)
		}
	}
	return nil
}
