package server

import (
	"cmp"
	"context"
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"hongbao/buildinfo"
	"hongbao/campaign"
	"hongbao/cluster"
	"hongbao/proto"
	"hongbao/replicated"
)

// Cluster mode: -nats and -node make this server gateway I of N (package
// cluster). Only the SETs it owns run here; the bus carries events for the
// others to their gateways.

// nodeOf parses -node I/N.
func (o *Options) nodeOf() (i, n int, err error) {
	a, b, ok := strings.Cut(o.Node, "/")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not I/N", o.Node)
	}
	if i, err = strconv.Atoi(a); err == nil {
		n, err = strconv.Atoi(b)
	}
	if err != nil || n < 1 || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("%q: want I/N with 0 ≤ I < N", o.Node)
	}
	return i, n, nil
}

func (o *Options) validateCluster(bad func(flag, format string, args ...any)) {
	switch {
	case o.NATS == "":
		bad("nats", "empty: -node needs the NATS URL of the cluster")
	case o.Node == "":
		bad("node", "empty: -nats needs this gateway's I/N")
	}
	if o.Node != "" {
		_, n, err := o.nodeOf()
		if err != nil {
			bad("node", "%v", err)
		} else if o.Sets < n {
			bad("sets", "%d: a cluster of %d gateways needs at least one SET each", o.Sets, n)
		}
	}
	if o.Pipeline != "ring" {
		bad("pipeline", "%q: a cluster runs the ring pipeline only", o.Pipeline)
	}
	if strings.Contains(o.NATS, "@") {
		bad("nats", "credentials in the URL show in ps and in the log: give them with -nats-user and -nats-password-file (or $%s), -nats-creds or -nats-nkey", NATSPassEnv)
	}
	if ids := len(slices.DeleteFunc([]string{o.NATSCreds, o.NATSNKey, o.NATSUser}, func(s string) bool { return s == "" })); ids > 1 {
		bad("nats-creds", "-nats-creds, -nats-nkey and -nats-user: give this gateway one identity")
	}
	if o.NATSUser != "" && o.NATSPassFile == "" && os.Getenv(NATSPassEnv) == "" {
		bad("nats-user", "%q needs its password: -nats-password-file or $%s", o.NATSUser, NATSPassEnv)
	}
	if o.NATSUser == "" && o.NATSPassFile != "" {
		bad("nats-password-file", "a password needs -nats-user")
	}
	if (o.NATSCert == "") != (o.NATSKey == "") {
		bad("nats-cert", "-nats-cert and -nats-key go together")
	}
	if o.ClusterTimeout <= 0 {
		bad("cluster-timeout", "%v: want a positive duration", o.ClusterTimeout)
	}
	if o.Advertise != "" {
		if _, _, err := net.SplitHostPort(o.Advertise); err != nil || len(o.Advertise) > proto.MaxRedirectAddr {
			bad("advertise", "%q is not host:port of at most %d bytes (a LOGIN_ACK 3 carries it)", o.Advertise, proto.MaxRedirectAddr)
		}
	} else if host, _, err := net.SplitHostPort(strings.TrimSpace(strings.Split(o.Listen, ",")[0])); err == nil {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			bad("advertise", "empty, and -listen %q names no address other gateways can send users to: give -advertise host:port", o.Listen)
		}
	}
}

// natsPassword reads the password of -nats-user, "" without one.
func (o *Options) natsPassword() (string, error) {
	if o.NATSUser == "" {
		return "", nil
	}
	return readSecret("", "nats-password-file", o.NATSPassFile, NATSPassEnv)
}

// natsAuth is this gateway's identity on NATS, with password.
func (o *Options) natsAuth(password string) cluster.Auth {
	return cluster.Auth{Creds: o.NATSCreds, NKey: o.NATSNKey, User: o.NATSUser, Password: password,
		CA: o.NATSCA, Cert: o.NATSCert, Key: o.NATSKey}
}

// localSets is how many SETs this server runs: -sets alone, its share of
// them in a cluster.
func (o Options) localSets() int {
	i, n, err := o.nodeOf()
	if o.NATS == "" || err != nil {
		return o.Sets
	}
	return (o.Sets - i + n - 1) / n
}

// joinCluster makes this server a gateway of the cluster, before the SETs
// are built: only its own are.
func (s *Server) joinCluster() error {
	i, n, _ := s.opts.nodeOf()
	// An epoll loop blocked in epoll_wait keeps its P (a raw syscall). With
	// a P per loop, a goroutine the runtime's netpoller wakes — the NATS
	// client's reader, which every crossing passes — waits until sysmon takes
	// a P back, 10–20 ms when the process is otherwise idle: one P more
	// than the loops is always free for it. A loop parked in the netpoller
	// (-loop-wait netpoller) holds none.
	if s.opts.Ingress == "epoll" && s.opts.LoopWait == "syscall" && runtime.GOMAXPROCS(0) <= s.opts.Loops {
		runtime.GOMAXPROCS(s.opts.Loops + 1)
		s.log.Info("cluster: GOMAXPROCS raised above the epoll loops, so that NATS's goroutines always find a P", "gomaxprocs", s.opts.Loops+1, "loops", s.opts.Loops)
	}
	pass, err := s.opts.natsPassword()
	if err != nil {
		return err
	}
	token, err := s.opts.adminToken()
	if err != nil {
		return err
	}
	s.campaignKey = []byte(token)
	co := cluster.Options{URL: cmp.Or(s.opts.coreNATS, s.opts.NATS), Node: i, Nodes: n, Sets: s.opts.Sets, Name: s.opts.Name,
		Timeout: s.opts.ClusterTimeout, Ring: s.opts.Ring, Auth: s.opts.natsAuth(pass), Logger: s.log}
	if s.repl != nil {
		co.Owners, co.Former, co.Lease, co.Name = s.repl.OwnerOf, s.repl.FormerOf, s.opts.Lease, s.repl.Name()
	}
	node, err := cluster.Join(co, buildinfo.Read().Version)
	if err != nil {
		return err
	}
	s.node = node
	return nil
}

// startCluster announces this gateway's addresses and starts the links.
func (s *Server) startCluster() error {
	addr := s.opts.Advertise
	if addr == "" {
		addr = s.Addrs()[0].String()
	}
	s.node.SetAddrs(addr, s.AdminAddr())
	if err := s.node.Serve("stats", func(int, []byte) []byte {
		b, _ := json.Marshal(struct {
			Node int `json:"node"`
			Stats
		}{s.node.Options().Node, s.Stats()})
		return b
	}); err != nil {
		return err
	}
	if err := s.node.Serve("campaign", s.campaignFromPeer); err != nil {
		return err
	}
	if s.repl != nil {
		if err := s.node.ServeEach("move", s.repl.ServeMove); err != nil {
			return err
		}
	}
	return s.node.Start(s.bus, s.journal)
}

// handleCluster answers GET /cluster.
func (s *Server) handleCluster(w http.ResponseWriter, r *http.Request) {
	if s.node == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not a cluster: this server runs without -nats"})
		return
	}
	m := struct {
		cluster.Map
		Moves     []replicated.MoveStatus `json:"moves,omitempty"`     // -journal jetstream: the moves of this gateway's SETs in flight, both ways
		Placement []replicated.SetStatus  `json:"placement,omitempty"` // -journal jetstream: every SET's state on this gateway
	}{Map: s.node.Map()}
	if s.repl != nil {
		m.Moves = s.repl.Moves()
		m.Placement = s.repl.Placement()
	}
	writeJSON(w, http.StatusOK, m)
}

// ClusterStats is GET /cluster/stats: the gateways' ledgers summed.
type ClusterStats struct {
	Stats
	Gateways int   `json:"gateways"` // that answered, this one included
	Missing  []int `json:"missing"`  // nodes that did not answer within the bound
}

// handleClusterStats answers GET /cluster/stats.
func (s *Server) handleClusterStats(w http.ResponseWriter, r *http.Request) {
	if s.node == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not a cluster: this server runs without -nats"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.ClusterTimeout)
	defer cancel()
	answers, err := s.node.Request(ctx, "stats", nil)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "NATS: " + err.Error()})
		return
	}
	all := []Stats{s.Stats()}
	seen := map[int]bool{s.node.Options().Node: true}
	for _, a := range answers { // one per gateway asked, each from the gateway its subject names
		var g struct {
			Node int `json:"node"`
			Stats
		}
		if json.Unmarshal(a.Data, &g) != nil || g.Node != a.Node {
			s.node.Refused(a.Node, "a stats answer that does not decode or names another gateway")
			continue
		}
		seen[g.Node] = true
		all = append(all, g.Stats)
	}
	out := ClusterStats{Stats: sumStats(all), Gateways: len(all), Missing: []int{}}
	shares := s.shares()
	for node := range s.node.Options().Nodes {
		// Where SETs fail over, a gateway that runs none (gone, or not
		// started) holds no money: only one that runs SETs is missed.
		if !seen[node] && (s.repl == nil || shares[node] > 0) {
			out.Missing = append(out.Missing, node)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// sumStats adds the gateways' ledgers field by field.
func sumStats(all []Stats) Stats {
	var sum map[string]any
	for _, st := range all {
		b, _ := json.Marshal(st)
		var m map[string]any
		json.Unmarshal(b, &m)
		sum = addJSON(sum, m).(map[string]any)
	}
	var out Stats
	b, _ := json.Marshal(sum)
	json.Unmarshal(b, &out)
	return out
}

// addJSON adds two decoded JSON values: numbers add, objects add key by
// key, anything else keeps a's (or b's when a has none).
func addJSON(a, b any) any {
	switch bv := b.(type) {
	case float64:
		if av, ok := a.(float64); ok {
			return av + bv
		}
		return bv
	case map[string]any:
		am, _ := a.(map[string]any)
		if am == nil {
			am = map[string]any{}
		}
		for k, v := range bv {
			am[k] = addJSON(am[k], v)
		}
		return am
	}
	if a != nil {
		return a
	}
	return b
}

// closeCluster leaves the cluster: the links drain into NATS.
func (s *Server) closeCluster() error {
	if s.node == nil {
		return nil
	}
	return s.node.Close()
}

// redirect is the ingress's LOGIN_ACK 3 address for a SET run elsewhere:
// none while it moves from here (retry shortly).
func (s *Server) redirect(set int) string {
	if s.node == nil || s.repl != nil && s.repl.IsMoving(set) {
		return ""
	}
	return s.node.OwnerAddr(set)
}

// A campaign created on any gateway is dealt over every SET of the cluster:
// each gateway deals its part (its SETs' share of the rate and the total)
// over its own SETs, under the id the creating gateway gave, and journals
// it as its own. Deals never cross, so every gateway recovers its part from
// its own journal. Where SETs fail over (-journal jetstream) the parts
// follow the ownership records at the campaign's start, and a part is not
// journaled: it ends with its gateway, whose SETs keep what it dealt.

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

// broadcastCampaign tells the other gateways of op, signed.
func (s *Server) broadcastCampaign(op campaignOp) error {
	b, _ := json.Marshal(op)
	signed, _ := json.Marshal(cluster.SignedOp{Op: b, Proof: cluster.Proof(s.campaignKey, b)})
	return s.node.Broadcast("campaign", signed)
}

// openCampaignOp returns the campaign op gateway from sent in data, or why
// it is refused: a proof that does not hold under this gateway's admin
// token, an op naming another sender, an id not of the sender's.
func (s *Server) openCampaignOp(from int, data []byte) (campaignOp, string) {
	var signed cluster.SignedOp
	var op campaignOp
	if json.Unmarshal(data, &signed) != nil || json.Unmarshal(signed.Op, &op) != nil {
		return op, "a campaign message that does not decode"
	}
	if len(s.campaignKey) > 0 && !hmac.Equal([]byte(signed.Proof), []byte(cluster.Proof(s.campaignKey, signed.Op))) {
		return op, "a campaign message without the proof of this gateway's -admin-token (every gateway needs the same one)"
	}
	if o := s.node.Options(); op.From != from || op.ID <= 0 || op.ID%o.Nodes != from {
		return op, "a campaign message naming another gateway, or an id not of its sender's"
	}
	return op, ""
}

// shares is how many SETs each gateway runs: by the rule (s mod N), or
// where SETs fail over by their ownership records of the moment.
func (s *Server) shares() []int {
	o := s.node.Options()
	sh := make([]int, o.Nodes)
	for set := range o.Sets {
		if n := o.Owner(set); n >= 0 {
			sh[n]++
		}
	}
	return sh
}

// partOf is node's part of campaign p: its SETs' share of the rate and the
// total (shares: the SETs of each gateway), rounded so that the parts add
// up to p's exactly. A part with envelopes but a rate under 1 a second
// deals 1 a second.
func partOf(p campaign.Params, node int, shares []int) campaign.Params {
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

// startClusterCampaign starts this gateway's part of p and tells the others
// to start theirs. A part of no envelope (a total smaller than the SETs) is
// not started; its id stays taken.
func (s *Server) startClusterCampaign(p campaign.Params) (campaign.Status, error) {
	o := s.node.Options()
	if err := p.Validate(s.campLimits); err != nil {
		return campaign.Status{}, err
	}
	id := s.camps.ReserveID()
	shares := s.shares()
	part := partOf(p, o.Node, shares)
	st := campaign.Status{ID: id, Params: part, Started: time.Now(), Done: true, State: campaign.Finished}
	if part.Total > 0 {
		c, err := s.camps.StartAs(id, part)
		if err != nil {
			return campaign.Status{}, err
		}
		st = c.Status()
	}
	if err := s.broadcastCampaign(campaignOp{Op: "start", From: o.Node, ID: id, Params: p, Shares: shares}); err != nil {
		s.log.Error("cluster: the other gateways were not told of a campaign: only this gateway's part is dealt", "id", id, "err", err)
	}
	return st, nil
}

// cancelClusterCampaign tells the other gateways to cancel their part of id.
func (s *Server) cancelClusterCampaign(id int) {
	if err := s.broadcastCampaign(campaignOp{Op: "cancel", From: s.node.Options().Node, ID: id}); err != nil {
		s.log.Error("cluster: the other gateways were not told to cancel a campaign", "id", id, "err", err)
	}
}

// campaignFromPeer starts or cancels this gateway's part of a campaign
// another gateway created or cancelled.
func (s *Server) campaignFromPeer(from int, data []byte) []byte {
	op, why := s.openCampaignOp(from, data)
	if why != "" {
		s.node.Refused(from, why)
		return nil
	}
	o := s.node.Options()
	switch op.Op {
	case "start":
		shares := op.Shares
		if len(shares) != o.Nodes {
			shares = s.shares()
		}
		part := partOf(op.Params, o.Node, shares)
		if part.Total == 0 {
			return nil // nothing for this gateway's SETs
		}
		if _, err := s.camps.StartAs(op.ID, part); err != nil {
			s.log.Error("cluster: this gateway's part of a campaign was not started: the cluster deals less than asked", "id", op.ID, "from", op.From, "err", err)
			return nil
		}
		s.log.Info("campaign part started", "id", op.ID, "from", op.From, "kind", part.Kind, "rate", part.Rate, "total", part.Total)
	case "cancel":
		if _, err := s.camps.Cancel(op.ID); err == nil {
			s.log.Info("campaign part cancelled", "id", op.ID, "from", op.From)
		}
	}
	return nil
}

// validateReplicated checks the flags of a cluster whose SETs fail over.
func (o *Options) validateReplicated(bad func(flag, format string, args ...any)) {
	if o.NATS == "" || o.Node == "" {
		bad("journal", "jetstream needs -nats and -node I/N (N: the most gateways the cluster will have)")
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		bad("replicas", "%d is not in 1..5", o.Replicas)
	}
	if o.Lease < 500*time.Millisecond || o.Lease > time.Minute {
		bad("lease", "%v is not in 500ms..1m (heartbeats come every 250 ms)", o.Lease)
	}
	if o.Name != "" && (strings.ContainsAny(o.Name, " \t.*>") || len(o.Name) > 64) {
		bad("name", "%q: at most 64 bytes, no spaces, dots or wildcards", o.Name)
	}
}
