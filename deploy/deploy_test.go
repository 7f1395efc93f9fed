// Package deploy_test checks what deploy/ holds against the real parsers
// and a live server: the Prometheus rules and scrape configuration, the
// Grafana dashboard's queries, the systemd unit and the kernel settings.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"

	"github.com/hongbao-io/hongbao/internal/embednats"
	"github.com/hongbao-io/hongbao/jsjournal"
	"github.com/hongbao-io/hongbao/server"
)

const rulesFile = "prometheus/hongbao.rules.yml"

// promql parses as Prometheus does, with its default functions.
var promql = parser.NewParser(parser.Options{})

// use is a series selector of a rule or a panel, and where it is.
type use struct {
	where string
	vs    *parser.VectorSelector
}

// selectors returns the series selectors of expr.
func selectors(t *testing.T, where, expr string) []use {
	t.Helper()
	e, err := promql.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v\n%s", where, err, expr)
		return nil
	}
	var out []use
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, use{where, vs})
		}
		return nil
	})
	return out
}

// runbookURL is where each alert's runbook_url points, less its section:
// docs/RUNBOOK.md as the published module shows it.
const runbookURL = "https://github.com/hongbao-io/hongbao/blob/main/docs/RUNBOOK.md#"

// runbookSections returns the names of docs/RUNBOOK.md's sections ("## Name").
func runbookSections(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../docs/RUNBOOK.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if name, ok := strings.CutPrefix(line, "## "); ok {
			out[strings.TrimSpace(name)] = true
		}
	}
	return out
}

// rules parses the rules file and returns the series its expressions
// select, and the names it records.
func rules(t *testing.T) (used []use, recorded map[string]bool) {
	t.Helper()
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("%s: %v", rulesFile, err)
	}
	if groups == nil {
		t.FailNow()
	}
	recorded = map[string]bool{}
	runbook := runbookSections(t)
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			where := rulesFile + ": " + r.Record + r.Alert
			used = append(used, selectors(t, where, r.Expr)...)
			if r.Record != "" {
				recorded[r.Record] = true
			} else {
				alerts++
				if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("%s: an alert needs a severity, a summary and a description", where)
				}
				if want := runbookURL + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
					t.Errorf("%s: runbook_url %q; want %q", where, r.Annotations["runbook_url"], want)
				}
				if !runbook[r.Alert] {
					t.Errorf("%s: docs/RUNBOOK.md has no section \"## %s\"", where, r.Alert)
				}
			}
		}
	}
	if alerts == 0 || len(recorded) == 0 {
		t.Fatalf("%s: %d alerts, %d recording rules", rulesFile, alerts, len(recorded))
	}
	return used, recorded
}

// dashboard returns the series the dashboard's queries select.
func dashboard(t *testing.T) []use {
	t.Helper()
	const file = "grafana/hongbao.json"
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string  `json:"title"`
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name, Type string
				Query      any `json:"query"` // a string, or an object with one
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("%s: no title or uid", file)
	}
	// Grafana's variables, as Grafana substitutes them.
	vars := strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*")
	var used []use
	queries := 0
	// A collapsed row holds its panels inside it: they are checked too.
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", file, p.Title)
			}
			for _, q := range p.Targets {
				queries++
				used = append(used, selectors(t, file+": "+p.Title, vars.Replace(q.Expr))...)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	// A query variable's label_values(SELECTOR, label) selects series too.
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		inner, ok := strings.CutPrefix(q, "label_values(")
		i := strings.LastIndex(inner, ",")
		if !ok || i < 0 {
			t.Errorf("%s: variable %q: query %q is not label_values(selector, label)", file, v.Name, q)
			continue
		}
		used = append(used, selectors(t, file+": variable "+v.Name, inner[:i])...)
	}
	if queries < 20 {
		t.Errorf("%s: %d queries", file, queries)
	}
	return used
}

// panel is a dashboard panel; a row's panels, when it is collapsed, are in it.
type panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// TestPrometheusConfig: the scrape configuration decodes strictly into
// Prometheus's fields (its HTTP client configuration by Prometheus's own
// type), scrapes the job the rules select, and names the rules file; with
// promtool installed, promtool checks it whole.
func TestPrometheusConfig(t *testing.T) {
	const file = "prometheus/prometheus.yml"
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Global struct {
			ScrapeInterval     model.Duration `yaml:"scrape_interval"`
			EvaluationInterval model.Duration `yaml:"evaluation_interval"`
		} `yaml:"global"`
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName        string                   `yaml:"job_name"`
			ScrapeInterval model.Duration           `yaml:"scrape_interval"`
			ScrapeTimeout  model.Duration           `yaml:"scrape_timeout"`
			MetricsPath    string                   `yaml:"metrics_path"`
			Authorization  *commoncfg.Authorization `yaml:"authorization"`
			StaticConfigs  []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if !slices.Contains(c.RuleFiles, filepath.Base(rulesFile)) {
		t.Errorf("%s: rule_files %v; want %s", file, c.RuleFiles, filepath.Base(rulesFile))
	}
	if len(c.ScrapeConfigs) != 1 || c.ScrapeConfigs[0].JobName != "hongbao" || c.ScrapeConfigs[0].MetricsPath != "/metrics" {
		t.Fatalf("%s: want one scrape config, job hongbao, of /metrics", file)
	}
	sc := c.ScrapeConfigs[0]
	hc := commoncfg.HTTPClientConfig{Authorization: sc.Authorization}
	if err := hc.Validate(); err != nil || sc.Authorization == nil || sc.Authorization.CredentialsFile == "" {
		t.Errorf("%s: the admin token as a bearer credentials file: %v", file, err)
	}
	if sc.ScrapeTimeout > sc.ScrapeInterval || sc.ScrapeInterval == 0 || len(sc.StaticConfigs) == 0 || len(sc.StaticConfigs[0].Targets) == 0 {
		t.Errorf("%s: a timeout within the interval and some targets", file)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		return
	}
	// promtool reads the credentials file and the rules beside the
	// configuration: a copy with both in a directory of the test's.
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"token": []byte("t"), filepath.Base(rulesFile): rules,
		"prometheus.yml": bytes.ReplaceAll(b, []byte(sc.Authorization.CredentialsFile), []byte(token))} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(promtool, "check", "config", filepath.Join(dir, "prometheus.yml")).CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
}

// TestMetricsExist: every metric a rule or a panel names is one a live
// server or gateway exposes (or a recording rule's), and the label values
// it matches are ones they expose (a result, a bucket's bound, a type): a
// single server with the file journal, and a gateway whose SETs fail over.
func TestMetricsExist(t *testing.T) {
	used, recorded := rules(t)
	used = append(used, dashboard(t)...)
	live := map[string][]labels.Labels{"up": nil} // Prometheus's own
	single := server.Options{Data: t.TempDir()}
	ns := embednats.StartTestJetStream(t, t.TempDir())
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jsjournal.Provision(t.Context(), js, jsjournal.Layout{Prefix: jsjournal.DefaultPrefix, Sets: 2, Gateways: 1, Replicas: 1}, false); err != nil {
		t.Fatal(err)
	}
	gateway := server.Options{Sets: 2, NATS: ns.URL(), Node: "0/1", Journal: "jetstream", Replicas: 1, Lease: time.Second,
		ClusterTimeout: 500 * time.Millisecond}
	for _, o := range []server.Options{single, gateway} {
		for _, ls := range scrape(t, o) {
			n := ls.Get(labels.MetricName)
			live[n] = append(live[n], ls)
		}
	}
	for _, u := range used {
		series, ok := live[u.vs.Name]
		switch {
		case recorded[u.vs.Name] || u.vs.Name == "up":
			continue
		case !ok:
			t.Errorf("%s names %s: no server exposes it", u.where, u.vs.Name)
			continue
		}
		if bad := unmatched(u.vs.LabelMatchers, series); bad != "" {
			t.Errorf("%s selects %s: no series of a live server has %s", u.where, u.vs, bad)
		}
	}
}

// unmatched checks matchers against the live series of one metric: some
// series matches them all, and each value a matcher lists as a literal
// (le="0.049152", type=~"shake|open") is a value of some series. job and
// instance are Prometheus's, not the server's. It returns what is missing,
// or "".
func unmatched(matchers []*labels.Matcher, series []labels.Labels) string {
	var ms []*labels.Matcher
	for _, m := range matchers {
		if m.Name != labels.MetricName && m.Name != "job" && m.Name != "instance" {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return ""
	}
	for _, m := range ms {
		var want []string
		switch m.Type {
		case labels.MatchEqual:
			want = []string{m.Value}
		case labels.MatchRegexp:
			// An alternation of literals: each must be a value.
			if alts := strings.Split(m.Value, "|"); !slices.ContainsFunc(alts, func(a string) bool { return regexp.QuoteMeta(a) != a }) {
				want = alts
			}
		}
		for _, v := range want {
			if !slices.ContainsFunc(series, func(ls labels.Labels) bool { return ls.Get(m.Name) == v }) {
				return fmt.Sprintf("%s=%q", m.Name, v)
			}
		}
	}
	all := func(ls labels.Labels) bool {
		for _, m := range ms {
			if !m.Matches(ls.Get(m.Name)) {
				return false
			}
		}
		return true
	}
	if !slices.ContainsFunc(series, all) {
		return "a series matching them all"
	}
	return ""
}

// scrape starts a server of o on loopback and returns the series of its
// /metrics.
func scrape(t *testing.T, o server.Options) []labels.Labels {
	t.Helper()
	o.Listen, o.Admin, o.Ring, o.Loops = "127.0.0.1:0", "127.0.0.1:0", 128, 1
	if o.Sets == 0 {
		o.Sets = 2
	}
	o.Fill()
	s, err := server.New(o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	resp, err := http.Get("http://" + s.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	var out []labels.Labels
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		// The series, then its value (no timestamps): a label value may
		// hold a space, the value does not.
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("/metrics: %q is not a sample", line)
		}
		ls, err := promql.ParseMetric(line[:i])
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		out = append(out, ls)
	}
	return out
}

// TestSystemdUnit: systemd-analyze verify finds nothing to say of the
// unit, where it is installed.
func TestSystemdUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze here")
	}
	b, err := os.ReadFile("systemd/hongbao.service")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// verify checks that ExecStart's binary exists: a stand-in.
	bin := filepath.Join(dir, "hongbao-server")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(dir, "hongbao.service")
	if err := os.WriteFile(unit, bytes.ReplaceAll(b, []byte("/usr/local/bin/hongbao-server"), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, want := range []string{"LimitNOFILE=", "LoadCredential=auth-secret:", "StateDirectory=hongbao", "Restart=always", "NoNewPrivileges=yes"} {
		if !bytes.Contains(b, []byte("\n"+want)) {
			t.Errorf("the unit has no %s", want)
		}
	}
}

// TestSysctl: every setting is key = value with a line of reason above
// it, and names a setting this kernel has, unless it is prefixed "-"
// (sysctl.d(5): skipped where the kernel lacks it, as conntrack's without
// its module).
func TestSysctl(t *testing.T) {
	b, err := os.ReadFile("sysctl/90-hongbao.conf")
	if err != nil {
		t.Fatal(err)
	}
	setting := regexp.MustCompile(`^(-?)([a-z0-9_][a-z0-9_.-]*) = (\S+( \S+)*)$`)
	lines := strings.Split(string(b), "\n")
	n := 0
	for i, line := range lines {
		if line == "" || line[0] == '#' {
			continue
		}
		m := setting.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("line %d: %q is not key = value", i+1, line)
			continue
		}
		n++
		optional, key := m[1] == "-", m[2]
		if i == 0 || !strings.HasPrefix(lines[i-1], "#") {
			t.Errorf("line %d: %s has no reason above it", i+1, key)
		}
		path := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
		if _, err := os.Stat(path); err != nil && !optional {
			t.Errorf("line %d: %s: %v", i+1, key, err)
		}
		// A module's settings exist only once it is loaded: optional.
		if strings.HasPrefix(key, "net.netfilter.") && !optional {
			t.Errorf(`line %d: %s: want "-%[2]s", skipped where conntrack is not loaded`, i+1, key)
		}
	}
	if n < 8 {
		t.Fatalf("%d settings", n)
	}
}
