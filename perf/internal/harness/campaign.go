package harness

import (
	"net/url"
	"strconv"
)

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

// StartCampaigns starts the shake campaign (ShakeCampaign) and then the
// send campaign (SendCampaign), each for secs seconds, and returns those it
// started; it stops at the first that fails. After each start, did (if not
// nil) gets its kind, query and outcome.
func (a *Admin) StartCampaigns(shakeRate, sendRate, recipients, secs int, did func(kind string, q url.Values, c Campaign, err error)) ([]Campaign, error) {
	var out []Campaign
	for _, p := range []struct {
		kind string
		q    url.Values
	}{
		{"shake", ShakeCampaign(shakeRate, secs)},
		{"send", SendCampaign(sendRate, secs, recipients)},
	} {
		c, err := a.StartCampaign(p.kind, p.q)
		if did != nil {
			did(p.kind, p.q, c, err)
		}
		if err != nil {
			return out, err
		}
		out = append(out, c)
	}
	return out, nil
}
