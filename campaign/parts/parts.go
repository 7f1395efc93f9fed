// Package parts deals a campaign over every SET of a cluster: each gateway
// deals its part (its SETs' share of the rate and the total) over its own
// SETs, under the id the creating gateway gave, and journals it as its own.
// Deals never cross, so every gateway recovers its part from its own
// journal. Where SETs fail over (-journal jetstream) the parts follow the
// claims at the campaign's start, and a part is not journaled: it ends with
// its gateway, whose SETs keep what it dealt.
package parts

import (
	"crypto/hmac"
	"encoding/json"
	"log/slog"
	"time"

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
}

// campaignOp is what a gateway tells the others of a campaign.
type campaignOp struct {
	Op     string          `json:"op"` // start | cancel
	From   int             `json:"from"`
	ID     int             `json:"id"`
	Params campaign.Params `json:"params,omitzero"`
	// Shares are the SETs each gateway ran when the campaign was created:
	// each deals its share of them, so that the parts add up to the whole.
	Shares []int `json:"shares,omitempty"`
}

// broadcast tells the other gateways of op, signed.
func (d *Dealer) broadcast(op campaignOp) error {
	b, _ := json.Marshal(op)
	signed, _ := json.Marshal(cluster.SignedOp{Op: b, Proof: cluster.Proof(d.Key, b)})
	return d.Node.Broadcast("campaign", signed)
}

// open returns the campaign op gateway from sent in data, or why
// it is refused: a proof that does not hold under this gateway's admin
// token, an op naming another sender, an id not of the sender's.
func (d *Dealer) open(from int, data []byte) (campaignOp, string) {
	var signed cluster.SignedOp
	var op campaignOp
	if json.Unmarshal(data, &signed) != nil || json.Unmarshal(signed.Op, &op) != nil {
		return op, "a campaign message that does not decode"
	}
	if len(d.Key) > 0 && !hmac.Equal([]byte(signed.Proof), []byte(cluster.Proof(d.Key, signed.Op))) {
		return op, "a campaign message without the proof of this gateway's -admin-token (every gateway needs the same one)"
	}
	if o := d.Node.Options(); op.From != from || op.ID <= 0 || op.ID%o.Nodes != from {
		return op, "a campaign message naming another gateway, or an id not of its sender's"
	}
	return op, ""
}

// PartOf is node's part of campaign p: its SETs' share of the rate and the
// total (shares: the SETs of each gateway), rounded so that the parts add
// up to p's exactly. A part with envelopes but a rate under 1 a second
// deals 1 a second.
func PartOf(p campaign.Params, node int, shares []int) campaign.Params {
	var lo, all uint64
	for n, k := range shares {
		if n < node {
			lo += uint64(k)
		}
		all += uint64(k)
	}
	if all == 0 || node >= len(shares) {
		p.Total, p.Rate = 0, 0
		return p
	}
	hi := lo + uint64(shares[node])
	share := func(x uint64) uint64 { return x*hi/all - x*lo/all }
	p.Total, p.Rate = share(p.Total), share(p.Rate)
	if p.Total > 0 && p.Rate == 0 {
		p.Rate = 1
	}
	return p
}

// Start starts this gateway's part of p and tells the others to start
// theirs. A part of no envelope (a total smaller than the SETs) is not
// started; its id stays taken.
func (d *Dealer) Start(p campaign.Params) (campaign.Status, error) {
	o := d.Node.Options()
	if err := p.Validate(d.Limits); err != nil {
		return campaign.Status{}, err
	}
	id := d.Runner.ReserveID()
	shares := d.Node.Shares()
	part := PartOf(p, o.Node, shares)
	st := campaign.Status{ID: id, Params: part, Started: time.Now(), Done: true, State: campaign.Finished}
	if part.Total > 0 {
		c, err := d.Runner.StartAs(id, part)
		if err != nil {
			return campaign.Status{}, err
		}
		st = c.Status()
	}
	if err := d.broadcast(campaignOp{Op: "start", From: o.Node, ID: id, Params: p, Shares: shares}); err != nil {
		d.Log.Error("cluster: the other gateways were not told of a campaign: only this gateway's part is dealt", "id", id, "err", err)
	}
	return st, nil
}

// Cancel tells the other gateways to cancel their part of id.
func (d *Dealer) Cancel(id int) {
	if err := d.broadcast(campaignOp{Op: "cancel", From: d.Node.Options().Node, ID: id}); err != nil {
		d.Log.Error("cluster: the other gateways were not told to cancel a campaign", "id", id, "err", err)
	}
}

// Serve starts or cancels this gateway's part of a campaign another
// gateway created or cancelled: the server serves it on the cluster's
// "campaign" subject.
func (d *Dealer) Serve(from int, data []byte) []byte {
	op, why := d.open(from, data)
	if why != "" {
		d.Node.Refused(from, why)
		return nil
	}
	o := d.Node.Options()
	switch op.Op {
	case "start":
		shares := op.Shares
		if len(shares) != o.Nodes {
			shares = d.Node.Shares()
		}
		part := PartOf(op.Params, o.Node, shares)
		if part.Total == 0 {
			return nil // nothing for this gateway's SETs
		}
		if _, err := d.Runner.StartAs(op.ID, part); err != nil {
			d.Log.Error("cluster: this gateway's part of a campaign was not started: the cluster deals less than asked", "id", op.ID, "from", op.From, "err", err)
			return nil
		}
		d.Log.Info("campaign part started", "id", op.ID, "from", op.From, "kind", part.Kind, "rate", part.Rate, "total", part.Total)
	case "cancel":
		if _, err := d.Runner.Cancel(op.ID); err == nil {
			d.Log.Info("campaign part cancelled", "id", op.ID, "from", op.From)
		}
	}
	return nil
}
