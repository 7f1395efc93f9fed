package server

import (
	"cmp"
	"context"
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

	"github.com/hongbao-io/hongbao/admin"
	"github.com/hongbao-io/hongbao/buildinfo"
	"github.com/hongbao-io/hongbao/cluster"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/replicated"
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
	if err := s.node.Serve("campaign", s.parts.Serve); err != nil {
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
		admin.WriteJSON(w, http.StatusNotFound, map[string]string{"error": "not a cluster: this server runs without -nats"})
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
	admin.WriteJSON(w, http.StatusOK, m)
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
		admin.WriteJSON(w, http.StatusNotFound, map[string]string{"error": "not a cluster: this server runs without -nats"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.ClusterTimeout)
	defer cancel()
	answers, err := s.node.Request(ctx, "stats", nil)
	if err != nil {
		admin.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "NATS: " + err.Error()})
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
	shares := s.node.Shares()
	for node := range s.node.Options().Nodes {
		// Where SETs fail over, a gateway that runs none (gone, or not
		// started) holds no money: only one that runs SETs is missed.
		if !seen[node] && (s.repl == nil || shares[node] > 0) {
			out.Missing = append(out.Missing, node)
		}
	}
	admin.WriteJSON(w, http.StatusOK, out)
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
