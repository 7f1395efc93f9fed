package server_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hongbao-io/hongbao/internal/embednats"
	"github.com/hongbao-io/hongbao/server"
)

// specPath is the admin API's OpenAPI document, relative to this package.
const specPath = "../docs/openapi.yaml"

// TestOpenAPI checks docs/openapi.yaml against the admin handlers of a real
// server on random ports, with an admin token set:
//   - every documented operation answers a valid request (its parameters'
//     examples, every value of an enum path parameter) with a documented 2xx
//     status and media type, and a JSON body with exactly the properties of
//     its schema (missing required or undocumented keys fail, recursively);
//   - every documented query parameter with a range answers 400 below and
//     above it, and when not a number, and every required one when missing,
//     with the Error shape naming the parameter first;
//   - every operation answers 401 with the Error shape without the token or
//     with a wrong one, and documents 401;
//   - the error statuses documented for starting and cancelling campaigns,
//     for /healthz and for the /cluster paths (404, 409, 400, 429, 503)
//     answer as documented, each on a server in the state that causes it
//     (the /cluster paths answer 200 on a gateway of a cluster);
//   - every route the admin mux serves, found by probing documented and
//     likely paths with an unknown method (405 lists the methods in Allow),
//     is documented: each allowed method (HEAD by GET), and a path that
//     answers any method is marked x-any-method.
func TestOpenAPI(t *testing.T) {
	t.Parallel()
	sp := loadSpec(t)
	const adminToken, readToken = "openapi-test-token", "openapi-read-token"
	tokens := func(o *server.Options) { o.AdminToken, o.ReadToken = adminToken, readToken }
	ts := startServer(t, tokens)
	// The /cluster paths are a gateway's: the first of a cluster of two
	// whose second has gone, so that /cluster lists a gateway down and
	// /cluster/stats one missing.
	gws := startGateways(t, embednats.StartTest(t), 2, 4, tokens)
	gw := gws[0]
	if err := gws[1].shutdown(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "gateway 0 to see gateway 1 down", func() bool {
		var m struct{ Gateways []struct{ Up bool } }
		gw.getJSON("/cluster", &m)
		return len(m.Gateways) == 2 && !m.Gateways[1].Up
	})
	// The moves' paths are a replicated gateway's (-journal jetstream): the
	// first of two, which runs every SET, so that SET 0 can move.
	js := embednats.StartTestJetStream(t, t.TempDir())
	rg := startReplicated(t, js, 0, 2, 2, tokens)
	waitFor(t, "the replicated gateway to run every SET", func() bool { return metric(t, rg, "hongbao_cluster_sets_running") == 2 })
	startReplicated(t, js, 1, 2, 2, tokens)
	waitFor(t, "the replicated gateways to hear each other", func() bool {
		var m struct{ Gateways []struct{ Up bool } }
		rg.getJSON("/cluster", &m)
		return len(m.Gateways) == 2 && m.Gateways[1].Up
	})
	base := func(path string) string {
		switch {
		case strings.HasPrefix(path, "/sets/") || path == "/cluster/rebalance" || path == "/cluster/drain":
			return rg.admin
		case path == "/cluster" || strings.HasPrefix(path, "/cluster/"):
			return gw.admin
		}
		return ts.admin
	}
	hc := &http.Client{Timeout: waitTime, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	t.Cleanup(hc.CloseIdleConnections)
	call := func(t *testing.T, method, path, tok string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, base(path)+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: reading the body: %v", method, path, err)
		}
		return resp, body
	}

	// A shake and a send campaign, so that GET /campaigns lists both shapes,
	// and a running one for the valid DELETE to cancel.
	finished := ts.startCampaign("shake", "rate=1&total=1&min=1&max=1")
	ts.startCampaign("send", "rate=1&total=1&min=1&max=1&recipients=1")
	running := ts.startCampaign("shake", "rate=1&total=4294967296&min=1&max=1")

	ops := sp.operations(t)
	if len(ops) == 0 {
		t.Fatalf("%s documents no operation", specPath)
	}
	find := func(method, path string) *operation {
		t.Helper()
		for i := range ops {
			if ops[i].path == path && ops[i].method == method {
				return &ops[i]
			}
		}
		t.Fatalf("%s does not document %s %s", specPath, method, path)
		return nil
	}
	start, cancel, health := find(http.MethodPost, "/campaigns/{campaign}"),
		find(http.MethodDelete, "/campaigns/{campaign}"), find(http.MethodGet, "/healthz")
	list := find(http.MethodGet, "/campaigns")
	clusterMap, clusterStats := find(http.MethodGet, "/cluster"), find(http.MethodGet, "/cluster/stats")
	if p := cancel.paths(t, true)[0]; p != fmt.Sprintf("/campaigns/%d", running.ID) {
		t.Fatalf("%s: the example of DELETE makes %s; want the id of the campaign this test starts to cancel, %d", specPath, p, running.ID)
	}

	t.Run("valid requests", func(t *testing.T) {
		for _, op := range ops {
			for _, path := range op.paths(t, false) {
				target := path + op.query(t, nil)
				resp, body := call(t, op.method, target, adminToken)
				what := fmt.Sprintf("%s %s", op.method, target)
				r := op.response(resp.StatusCode)
				if r == nil || resp.StatusCode/100 != 2 {
					t.Errorf("%s: %d %s; want a documented 2xx status (documented: %v)", what, resp.StatusCode, trim(body), op.statuses())
					continue
				}
				sp.checkBody(t, what, r, resp, body)
			}
		}
	})

	t.Run("parameters out of range", func(t *testing.T) {
		for _, op := range ops {
			path := op.paths(t, true)[0]
			for _, p := range op.params("query") {
				name := p["name"].(string)
				sch := sp.resolve(t, p["schema"])
				var bad []string
				if lo, ok := sch["minimum"].(int); ok {
					bad = append(bad, strconv.Itoa(lo-1))
				}
				if hi, ok := sch["maximum"].(int); ok {
					bad = append(bad, strconv.Itoa(hi+1))
				}
				if len(bad) > 0 { // a ranged parameter must also be a number
					bad = append(bad, "x")
				}
				cases := make([]*string, 0, len(bad)+1)
				for i := range bad {
					cases = append(cases, &bad[i])
				}
				if p["required"] == true {
					cases = append(cases, nil) // missing
				}
				for _, v := range cases {
					target := path + op.query(t, map[string]*string{name: v})
					resp, body := call(t, op.method, target, adminToken)
					what := fmt.Sprintf("%s %s", op.method, target)
					r := op.response(http.StatusBadRequest)
					if r == nil {
						t.Errorf("%s: parameter %s has a range or is required but the operation documents no 400", what, name)
						continue
					}
					if resp.StatusCode != http.StatusBadRequest {
						t.Errorf("%s: %d %s; want 400 naming %s", what, resp.StatusCode, trim(body), name)
						continue
					}
					sp.checkBody(t, what, r, resp, body)
					var e struct{ Error string }
					json.Unmarshal(body, &e)
					if !strings.HasPrefix(e.Error, name+"=") && !strings.HasPrefix(e.Error, name+":") {
						t.Errorf("%s: error %q does not name %s first", what, e.Error, name)
					}
				}
			}
		}
	})

	t.Run("parameters at their bounds", func(t *testing.T) {
		// A value at a documented bound is not rejected for that parameter
		// (a rule tying it to another parameter may still name that one).
		for _, op := range ops {
			path := op.paths(t, true)[0]
			for _, p := range op.params("query") {
				name := p["name"].(string)
				sch := sp.resolve(t, p["schema"])
				for _, k := range []string{"minimum", "maximum"} {
					b, ok := sch[k].(int)
					if !ok {
						continue
					}
					v := strconv.Itoa(b)
					target := path + op.query(t, map[string]*string{name: &v})
					resp, body := call(t, op.method, target, adminToken)
					var e struct{ Error string }
					json.Unmarshal(body, &e)
					if resp.StatusCode/100 != 2 && (strings.HasPrefix(e.Error, name+"=") || strings.HasPrefix(e.Error, name+":")) {
						t.Errorf("%s %s: %d %s; the documented %s of %s is rejected", op.method, target, resp.StatusCode, trim(body), k, name)
					}
				}
			}
		}
	})

	t.Run("admin token", func(t *testing.T) {
		for _, op := range ops {
			path := op.paths(t, true)[0]
			for _, tok := range []string{"", "wrong-" + adminToken} {
				resp, body := call(t, op.method, path, tok)
				what := fmt.Sprintf("%s %s with token %q", op.method, path, tok)
				r := op.response(http.StatusUnauthorized)
				switch {
				case op.public():
					if resp.StatusCode/100 != 2 {
						t.Errorf("%s, public: %d %s; want 2xx", what, resp.StatusCode, trim(body))
					}
				case r == nil:
					t.Errorf("%s: the operation documents no 401", what)
				case resp.StatusCode != http.StatusUnauthorized:
					t.Errorf("%s: %d %s; want 401", what, resp.StatusCode, trim(body))
				case resp.Header.Get("WWW-Authenticate") == "":
					t.Errorf("%s: 401 without WWW-Authenticate", what)
				default:
					sp.checkBody(t, what, r, resp, body)
				}
			}
		}
	})

	t.Run("read token", func(t *testing.T) {
		for _, op := range ops {
			path := op.paths(t, true)[0]
			resp, body := call(t, op.method, path, readToken)
			what := fmt.Sprintf("%s %s with the read token", op.method, path)
			if op.readable() || op.public() {
				if resp.StatusCode/100 != 2 {
					t.Errorf("%s, which lists readBearer: %d %s; want 2xx", what, resp.StatusCode, trim(body))
				}
				continue
			}
			r := op.response(http.StatusForbidden)
			switch {
			case r == nil:
				t.Errorf("%s: the operation neither lists readBearer nor documents 403", what)
			case resp.StatusCode != http.StatusForbidden:
				t.Errorf("%s: %d %s; want 403", what, resp.StatusCode, trim(body))
			default:
				sp.checkBody(t, what, r, resp, body)
			}
		}
	})

	t.Run("documented error statuses", func(t *testing.T) {
		q := start.query(t, nil)
		ts.waitCampaign(finished.ID)
		bare := startServer(t, func(o *server.Options) { o.AdminToken, o.Pipeline, o.Egress = adminToken, "none", "batch" })
		// One campaign at most, and a pool of one envelope: it soon waits.
		capped := startServer(t, func(o *server.Options) { o.AdminToken, o.MaxCampaigns, o.MaxPool = adminToken, 1, 1 })
		waiting := capped.startCampaign("shake", "rate=1000&total=4294967296&min=1&max=1")
		waitFor(t, "a campaign over -max-pool to wait", func() bool { return capped.campaignStatus(waiting.ID).Waiting != "" })
		type errCase struct {
			op         *operation
			base, path string
			code       int
		}
		check := func(t *testing.T, c errCase) []byte {
			t.Helper()
			req, _ := http.NewRequest(c.op.method, c.base+c.path, nil)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			what := c.op.method + " " + c.path
			if r := c.op.response(c.code); r == nil {
				t.Errorf("%s: %d not documented", what, c.code)
			} else if resp.StatusCode != c.code {
				t.Errorf("%s: %d %s; want %d", what, resp.StatusCode, trim(body), c.code)
			} else {
				sp.checkBody(t, what, r, resp, body)
			}
			return body
		}
		for _, c := range []errCase{
			{start, ts.admin, "/campaigns/foo" + q, http.StatusNotFound},          // a kind outside the enum
			{start, bare.admin, start.paths(t, true)[0] + q, http.StatusConflict}, // no campaigns with -pipeline=none
			{start, capped.admin, start.paths(t, true)[0] + q, http.StatusTooManyRequests},
			{cancel, ts.admin, fmt.Sprintf("/campaigns/%d", finished.ID), http.StatusConflict},
			{cancel, ts.admin, "/campaigns/999999", http.StatusNotFound},
			{cancel, ts.admin, "/campaigns/x", http.StatusBadRequest},
			{cancel, ts.admin, "/campaigns/0", http.StatusBadRequest},
			{cancel, bare.admin, cancel.paths(t, true)[0], http.StatusNotFound},
			{list, capped.admin, "/campaigns", http.StatusOK},       // with "waiting"
			{clusterMap, ts.admin, "/cluster", http.StatusNotFound}, // not a gateway
			{clusterStats, ts.admin, "/cluster/stats", http.StatusNotFound},
		} {
			check(t, c)
		}
		// A gateway whose NATS connection is closed, as at its shutdown.
		leaving := startGateways(t, embednats.StartTest(t), 1, 4, func(o *server.Options) { o.AdminToken = adminToken })[0]
		if err := leaving.LeaveCluster(); err != nil {
			t.Fatal(err)
		}
		check(t, errCase{clusterStats, leaving.admin, "/cluster/stats", http.StatusServiceUnavailable})
		// Cancelling again answers the same status.
		first := check(t, errCase{cancel, ts.admin, cancel.paths(t, true)[0], http.StatusOK})
		if again := check(t, errCase{cancel, ts.admin, cancel.paths(t, true)[0], http.StatusOK}); string(again) != string(first) {
			t.Errorf("DELETE %s twice: %s, then %s; want the same status", cancel.paths(t, true)[0], trim(first), trim(again))
		}
		// A shutdown that waits for a client: /healthz and POST answer 503.
		stopping := startServer(t, func(o *server.Options) { o.AdminToken = adminToken })
		c := login(t, stopping, 1)
		stopped := make(chan error, 1)
		go func() { stopped <- stopping.shutdown() }()
		waitFor(t, "POST to refuse campaigns once the shutdown began", func() bool {
			code, _ := stopping.do(http.MethodPost, start.paths(t, true)[0]+q, adminToken)
			return code != http.StatusOK
		})
		check(t, errCase{health, stopping.admin, "/healthz", http.StatusServiceUnavailable})
		check(t, errCase{start, stopping.admin, start.paths(t, true)[0] + q, http.StatusServiceUnavailable})
		c.c.Close()
		if err := <-stopped; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})

	t.Run("every registered pattern documented", func(t *testing.T) {
		for _, pat := range muxPatterns(t) {
			method, path, ok := strings.Cut(pat, " ")
			if !ok {
				method, path = "", pat
			}
			item := sp.templateItem(path)
			switch {
			case item == nil:
				t.Errorf("pattern %q: path %s not documented in %s", pat, path, specPath)
			case method == "" && item["x-any-method"] != true:
				t.Errorf("pattern %q serves every method: %s documents %s without x-any-method: true", pat, specPath, path)
			case method != "" && item[strings.ToLower(method)] == nil:
				t.Errorf("pattern %q: %s %s not documented in %s", pat, method, path, specPath)
			}
		}
	})

	t.Run("every route documented", func(t *testing.T) {
		probes := []string{"/", "/healthz", "/readyz", "/livez", "/health", "/cluster", "/version", "/config",
			"/ledger", "/users", "/sets", "/envelopes", "/admin", "/debug/vars", "/debug/pprof",
			"/debug/pprof/nope", "/debug/pprof/heap/x", "/stats/", "/metrics/", "/campaigns/",
			"/campaigns/1", "/campaigns/shake/1", "/campaigns/1/cancel"}
		for _, op := range ops { // with the examples: /debug/pprof/profile takes 30 s without
			for _, p := range op.paths(t, false) {
				probes = append(probes, p+op.query(t, nil))
			}
		}
		seen := map[string]bool{}
		for len(probes) > 0 {
			path := probes[0]
			probes = probes[1:]
			if seen[path] {
				continue
			}
			seen[path] = true
			resp, body := call(t, "PROBE", path, adminToken)
			path, _, _ = strings.Cut(path, "?")
			switch code := resp.StatusCode; {
			case code == http.StatusNotFound:
				// not served
			case code/100 == 3:
				if u, err := url.Parse(resp.Header.Get("Location")); err == nil {
					probes = append(probes, u.Path) // the mux's redirect to the route itself
				}
			case code == http.StatusMethodNotAllowed:
				for _, m := range strings.Split(resp.Header.Get("Allow"), ",") {
					m = strings.ToLower(strings.TrimSpace(m))
					if m == "head" {
						m = "get" // every GET route answers HEAD
					}
					if item := sp.pathItem(path); item == nil || item[m] == nil {
						t.Errorf("%s %s is served (Allow: %s) but not documented in %s",
							strings.ToUpper(m), path, resp.Header.Get("Allow"), specPath)
					}
				}
			default:
				if item := sp.pathItem(path); item == nil || item["x-any-method"] != true {
					t.Errorf("%s answers any method (%d %s to PROBE) but %s does not document it with x-any-method: true",
						path, code, trim(body), specPath)
				}
			}
		}
	})
}

// muxPatterns returns the string literal patterns that package server's
// non-test files register with a Handle or HandleFunc call: the admin mux's
// routes, wherever in the package they are registered.
func muxPatterns(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var pats []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "HandleFunc" && sel.Sel.Name != "Handle") {
				return true
			}
			if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					pats = append(pats, s)
				}
			}
			return true
		})
	}
	if len(pats) == 0 {
		t.Fatal("found no Handle or HandleFunc pattern in package server: the scan is broken")
	}
	return pats
}

// spec is a parsed OpenAPI document.
type spec struct {
	doc   map[string]any
	paths map[string]any
}

func loadSpec(t *testing.T) *spec {
	t.Helper()
	b, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", specPath, err)
	}
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.") {
		t.Fatalf("%s: openapi %q; want 3.x", specPath, v)
	}
	paths, ok := doc["paths"].(map[string]any)
	if !ok {
		t.Fatalf("%s: no paths", specPath)
	}
	return &spec{doc: doc, paths: paths}
}

// resolve follows a local $ref and returns the object it names.
func (sp *spec) resolve(t *testing.T, v any) map[string]any {
	t.Helper()
	for range 10 {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: %v is not an object", specPath, v)
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		if !strings.HasPrefix(ref, "#/") {
			t.Fatalf("%s: $ref %q is not local", specPath, ref)
		}
		var cur any = sp.doc
		for _, k := range strings.Split(ref[2:], "/") {
			cm, _ := cur.(map[string]any)
			if cur = cm[k]; cur == nil {
				t.Fatalf("%s: $ref %q names nothing", specPath, ref)
			}
		}
		v = cur
	}
	t.Fatalf("%s: $ref chain too long", specPath)
	return nil
}

// pathItem returns the path item whose template matches path: a literal one
// first, else one whose {param} segments match any non-empty segment.
func (sp *spec) pathItem(path string) map[string]any {
	if item, ok := sp.paths[path].(map[string]any); ok {
		return item
	}
	return sp.matchItem(path, func(tmpl, seg string) bool {
		if isParam(tmpl) {
			return seg != ""
		}
		return tmpl == seg
	})
}

// templateItem returns the path item documented for the mux pattern path:
// the same literal segments, and a {param} wherever path has one, whatever
// its name (OpenAPI has one template per path, as the mux has one route).
func (sp *spec) templateItem(path string) map[string]any {
	return sp.matchItem(path, func(tmpl, seg string) bool { return tmpl == seg || isParam(tmpl) && isParam(seg) })
}

// matchItem returns the path item whose template has path's segment count
// and every segment matching path's by match.
func (sp *spec) matchItem(path string, match func(tmpl, seg string) bool) map[string]any {
	segs := strings.Split(path, "/")
	for tmpl, item := range sp.paths {
		ts := strings.Split(tmpl, "/")
		if len(ts) != len(segs) {
			continue
		}
		ok := true
		for i := range ts {
			ok = ok && match(ts[i], segs[i])
		}
		if ok {
			return item.(map[string]any)
		}
	}
	return nil
}

func isParam(seg string) bool { return strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") }

// operation is one documented path and method.
type operation struct {
	sp     *spec
	path   string // template
	method string // upper case
	item   map[string]any
	op     map[string]any
}

func (sp *spec) operations(t *testing.T) []operation {
	t.Helper()
	var ops []operation
	for path, v := range sp.paths {
		item := v.(map[string]any)
		for _, m := range []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"} {
			if o, ok := item[m].(map[string]any); ok {
				ops = append(ops, operation{sp: sp, path: path, method: strings.ToUpper(m), item: item, op: o})
			}
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].path+ops[i].method < ops[j].path+ops[j].method })
	return ops
}

// public reports whether the operation needs no token: its security
// requirements are an empty list.
func (o operation) public() bool {
	list, ok := o.op["security"].([]any)
	return ok && len(list) == 0
}

// readable reports whether the operation lists the read token among its
// security requirements.
func (o operation) readable() bool {
	list, _ := o.op["security"].([]any)
	for _, req := range list {
		if m, ok := req.(map[string]any); ok {
			if _, ok := m["readBearer"]; ok {
				return true
			}
		}
	}
	return false
}

// params returns the operation's parameters (the path item's too) that are in where.
func (o operation) params(where string) []map[string]any {
	var ps []map[string]any
	for _, src := range []any{o.item["parameters"], o.op["parameters"]} {
		list, _ := src.([]any)
		for _, p := range list {
			pm := o.sp.resolveNoT(p)
			if pm["in"] == where {
				ps = append(ps, pm)
			}
		}
	}
	return ps
}

// resolveNoT resolves a parameter's $ref, leaving an unresolvable one as is.
func (sp *spec) resolveNoT(v any) map[string]any {
	m, _ := v.(map[string]any)
	if ref, ok := m["$ref"].(string); ok && strings.HasPrefix(ref, "#/") {
		var cur any = sp.doc
		for _, k := range strings.Split(ref[2:], "/") {
			cm, _ := cur.(map[string]any)
			cur = cm[k]
		}
		if cm, ok := cur.(map[string]any); ok {
			return cm
		}
	}
	return m
}

// paths returns the operation's path with its path parameters filled in:
// with every value of an enum (each in its own path), else with the
// example; only the example when exampleOnly.
func (o operation) paths(t *testing.T, exampleOnly bool) []string {
	t.Helper()
	out := []string{o.path}
	for _, p := range o.params("path") {
		name := p["name"].(string)
		var vals []string
		sch := o.sp.resolve(t, p["schema"])
		if enum, ok := sch["enum"].([]any); ok && !exampleOnly {
			for _, v := range enum {
				vals = append(vals, fmt.Sprint(v))
			}
		} else if ex, ok := p["example"]; ok {
			vals = append(vals, fmt.Sprint(ex))
		} else {
			t.Fatalf("%s %s: path parameter %s has neither an enum nor an example", o.method, o.path, name)
		}
		var next []string
		for _, path := range out {
			for _, v := range vals {
				next = append(next, strings.ReplaceAll(path, "{"+name+"}", url.PathEscape(v)))
			}
		}
		out = next
	}
	return out
}

// query returns "?…" with every query parameter's example, except that a
// parameter in set takes its value there (nil: left out). A required
// parameter needs an example.
func (o operation) query(t *testing.T, set map[string]*string) string {
	t.Helper()
	q := url.Values{}
	for _, p := range o.params("query") {
		name := p["name"].(string)
		if v, ok := set[name]; ok {
			if v != nil {
				q.Set(name, *v)
			}
			continue
		}
		if ex, ok := p["example"]; ok {
			q.Set(name, fmt.Sprint(ex))
		} else if p["required"] == true {
			t.Fatalf("%s %s: required parameter %s has no example", o.method, o.path, name)
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// response returns the documented response for code, resolved, or nil.
func (o operation) response(code int) map[string]any {
	rs, _ := o.op["responses"].(map[string]any)
	r, ok := rs[strconv.Itoa(code)]
	if !ok {
		return nil
	}
	return o.sp.resolveNoT(r)
}

func (o operation) statuses() []string {
	rs, _ := o.op["responses"].(map[string]any)
	var out []string
	for k := range rs {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkBody checks that resp's media type is one r documents and, for JSON
// with a schema, that body matches it.
func (sp *spec) checkBody(t *testing.T, what string, r map[string]any, resp *http.Response, body []byte) {
	t.Helper()
	content, _ := r["content"].(map[string]any)
	if len(content) == 0 {
		return
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		t.Errorf("%s: Content-Type %q: %v", what, resp.Header.Get("Content-Type"), err)
		return
	}
	media, ok := content[mt].(map[string]any)
	if !ok {
		t.Errorf("%s: Content-Type %s not documented for %d", what, mt, resp.StatusCode)
		return
	}
	if mt != "application/json" || media["schema"] == nil {
		return
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Errorf("%s: %v in %s", what, err, trim(body))
		return
	}
	for _, e := range sp.match(t, "$", media["schema"], v) {
		t.Errorf("%s: %s", what, e)
	}
}

// match walks schema against the decoded JSON value v and returns every
// mismatch: a wrong type, a required property missing, a property the
// schema does not list, an empty array (it would check nothing), a value
// outside an enum, an unparsable date-time.
func (sp *spec) match(t *testing.T, at string, schema any, v any) []string {
	s := sp.resolve(t, schema)
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, at+": "+fmt.Sprintf(format, args...)) }
	switch s["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			bad("%T; want an object", v)
			break
		}
		props, _ := s["properties"].(map[string]any)
		req, _ := s["required"].([]any)
		for _, r := range req {
			if _, ok := props[r.(string)]; !ok {
				bad("schema requires %q but does not list it", r)
			}
			if _, ok := m[r.(string)]; !ok {
				bad("property %q missing", r)
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			ps, ok := props[k]
			if !ok {
				bad("property %q not in the schema", k)
				continue
			}
			errs = append(errs, sp.match(t, at+"."+k, ps, m[k])...)
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			bad("%T; want an array", v)
			break
		}
		if len(a) == 0 {
			bad("empty array: nothing to check against the schema")
		}
		for i, e := range a {
			errs = append(errs, sp.match(t, fmt.Sprintf("%s[%d]", at, i), s["items"], e)...)
		}
	case "integer":
		n, ok := v.(json.Number)
		if _, err := n.Int64(); !ok || err != nil {
			if _, err := strconv.ParseUint(string(n), 10, 64); !ok || err != nil {
				bad("%v; want an integer", v)
			}
		}
	case "number":
		if _, ok := v.(json.Number); !ok {
			bad("%v; want a number", v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("%v; want a boolean", v)
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			bad("%v; want a string", v)
			break
		}
		if s["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				bad("%q is not a date-time: %v", str, err)
			}
		}
	default:
		bad("schema type %v not handled by this test", s["type"])
	}
	if enum, ok := s["enum"].([]any); ok && len(errs) == 0 {
		if !slices.ContainsFunc(enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) }) {
			bad("%v not in %v", v, enum)
		}
	}
	return errs
}

// trim shortens a body for a message.
func trim(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
