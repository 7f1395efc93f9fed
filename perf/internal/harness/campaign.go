package harness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CampaignMargin is how long before the end of the load the campaigns are
// sized to end: the client then sees every system envelope while it still
// sends, and its drain is quiet.
const CampaignMargin = 3 * time.Second

// Campaigns are the rates of the shake and the send campaign a tool starts.
type Campaigns struct {
	Shake, Send, Recipients int
}

// Add defines -shake-rate, the send campaign's rate flag (send: its name)
// and -recipients on fs.
func (c *Campaigns) Add(fs *flag.FlagSet, shake int, send string, sendRate int) {
	fs.IntVar(&c.Shake, "shake-rate", shake, "shake campaign: envelopes a second, amounts 1..200 fen")
	fs.IntVar(&c.Send, send, sendRate, "send campaign: system group envelopes a second, totals -recipients..2000 fen")
	fs.IntVar(&c.Recipients, "recipients", 3, "send campaign: recipients of each envelope")
}

// Validate reports rates below 1; send names the send campaign's flag.
func (c *Campaigns) Validate(send string) error {
	if c.Shake < 1 || c.Send < 1 {
		return fmt.Errorf("-shake-rate=%d, -%s=%d: want at least 1 each", c.Shake, send, c.Send)
	}
	return nil
}

// ShakeCampaign is the query of POST /campaigns/shake the tools start: rate
// envelopes a second for secs seconds, 1..200 fen each.
func ShakeCampaign(rate, secs int) url.Values {
	return url.Values{"rate": {strconv.Itoa(rate)}, "total": {strconv.Itoa(rate * secs)}, "min": {"1"}, "max": {"200"}}
}

// SendCampaign is the query of POST /campaigns/send the tools start: rate
// system group envelopes a second for secs seconds, each of recipients
// shares and recipients..2000 fen.
func SendCampaign(rate, secs, recipients int) url.Values {
	return url.Values{"rate": {strconv.Itoa(rate)}, "total": {strconv.Itoa(rate * secs)},
		"recipients": {strconv.Itoa(recipients)}, "min": {strconv.Itoa(recipients)}, "max": {"2000"}}
}

// StartCampaigns starts the shake campaign and then the send campaign, each
// for secs seconds, and returns those it started; it stops at the first
// that fails. Each one started is said and recorded as a step of r.
func (r *Run) StartCampaigns(a *Admin, c Campaigns, secs int, note string) ([]Campaign, error) {
	var out []Campaign
	for _, p := range []struct {
		kind string
		q    url.Values
	}{{"shake", ShakeCampaign(c.Shake, secs)}, {"send", SendCampaign(c.Send, secs, c.Recipients)}} {
		cmp, err := a.StartCampaign(p.kind, p.q)
		r.Step(fmt.Sprintf("%s campaign for %d s", p.kind, secs), fmt.Sprintf("curl -sS -XPOST '%s/campaigns/%s?%s'", a.URL, p.kind, p.q.Encode()))
		if err != nil {
			return out, err
		}
		r.Say("POST /campaigns/%s?%s → campaign %d (%ds)%s", p.kind, p.q.Encode(), cmp.ID, secs, note)
		out = append(out, cmp)
	}
	return out, nil
}

// WaitLogins polls logins until it reaches n or until deadline; an error
// when the client ends first or ctx does. It returns the last count.
func WaitLogins(ctx context.Context, logins func() int64, n int64, deadline time.Time, client *Client) (int64, error) {
	wait := time.Until(deadline).Round(time.Second)
	for {
		got := logins()
		if got >= n {
			return got, nil
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("%d of %d users logged in after %v", got, n, wait)
		}
		select {
		case <-client.Done():
			return got, errors.New("the load client ended before its users logged in")
		case <-ctx.Done():
			return got, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Logins is a logins function of WaitLogins for one server.
func (a *Admin) Logins() int64 {
	st, _, _ := a.Stats()
	return min(st.Logins, st.Connections)
}

// CampaignLine says what each campaign dealt of its total.
func CampaignLine(list []Campaign) string {
	var parts []string
	for _, c := range list {
		state := "running"
		if c.Done {
			state = "done"
		}
		parts = append(parts, fmt.Sprintf("%d %s %d/%d %s", c.ID, c.Kind, c.Dealt, c.Total, state))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Exact says whether list holds want campaigns, each done at its total.
func Exact(list []Campaign, want int) bool {
	ok := len(list) == want
	for _, c := range list {
		ok = ok && c.Done && c.Dealt == c.Total
	}
	return ok
}

// ClusterCampaigns sums each campaign over the gateways' lists: what the
// SETs each runs dealt of it (its shares), done once every gateway that
// holds a share says so.
func ClusterCampaigns(lists ...[]Campaign) []Campaign {
	byID := map[int]*Campaign{}
	var ids []int
	for _, list := range lists {
		for _, c := range list {
			sum := byID[c.ID]
			if sum == nil {
				cc := c
				cc.Dealt, cc.Amount, cc.Sets, cc.Done = 0, 0, 0, true
				sum = &cc
				byID[c.ID] = sum
				ids = append(ids, c.ID)
			}
			sum.Dealt += c.Dealt
			sum.Amount += c.Amount
			sum.Sets += c.Sets
			sum.Done = sum.Done && (c.Done || c.Sets == 0)
		}
	}
	slices.Sort(ids)
	out := make([]Campaign, 0, len(ids))
	for _, id := range ids {
		out = append(out, *byID[id])
	}
	return out
}
