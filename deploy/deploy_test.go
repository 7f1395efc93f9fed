// Package deploy_test checks what deploy/ holds against the real parsers
// and a live server: the Prometheus rules and scrape configuration, the
// Grafana dashboard's queries, the systemd unit and the kernel settings.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"

	"hongbao/internal/embednats"
	"hongbao/server"
)

const rulesFile = "prometheus/hongbao.rules.yml"

// promql parses as Prometheus does, with its default functions.
var promql = parser.NewParser(parser.Options{})

// names returns the metric names expr selects.
func names(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := promql.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v\n%s", where, err, expr)
		return nil
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs.Name)
		}
		return nil
	})
	return out
}

// rules parses the rules file and returns the metrics its expressions
// name, and the names it records.
func rules(t *testing.T) (used map[string]string, recorded map[string]bool) {
	t.Helper()
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("%s: %v", rulesFile, err)
	}
	if groups == nil {
		t.FailNow()
	}
	used, recorded = map[string]string{}, map[string]bool{}
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			where := rulesFile + ": " + r.Record + r.Alert
			for _, n := range names(t, where, r.Expr) {
				used[n] = where
			}
			if r.Record != "" {
				recorded[r.Record] = true
			} else {
				alerts++
				if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("%s: an alert needs a severity, a summary and a description", where)
				}
			}
		}
	}
	if alerts == 0 || len(recorded) == 0 {
		t.Fatalf("%s: %d alerts, %d recording rules", rulesFile, alerts, len(recorded))
	}
	return used, recorded
}

// dashboard returns the metrics the dashboard's queries name.
func dashboard(t *testing.T) map[string]string {
	t.Helper()
	const file = "grafana/hongbao.json"
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("%s: no title or uid", file)
	}
	// Grafana's variables, as Grafana substitutes them.
	vars := strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*")
	used := map[string]string{}
	queries := 0
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", file, p.Title)
		}
		for _, q := range p.Targets {
			queries++
			for _, n := range names(t, file+": "+p.Title, vars.Replace(q.Expr)) {
				used[n] = file + ": " + p.Title
			}
		}
	}
	if queries < 20 {
		t.Errorf("%s: %d queries", file, queries)
	}
	return used
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
// server or gateway exposes (or a recording rule's): a single server with
// the file journal, and a gateway whose SETs fail over.
func TestMetricsExist(t *testing.T) {
	used, recorded := rules(t)
	for n, where := range dashboard(t) {
		used[n] = where
	}
	live := map[string]bool{"up": true} // Prometheus's own
	single := server.Options{Data: t.TempDir()}
	ns := embednats.StartTestJetStream(t, t.TempDir())
	gateway := server.Options{Sets: 2, NATS: ns.URL(), Node: "0/1", Journal: "jetstream", Replicas: 1, Lease: time.Second,
		ClusterTimeout: 500 * time.Millisecond}
	for _, o := range []server.Options{single, gateway} {
		for n := range scrape(t, o) {
			live[n] = true
		}
	}
	for n, where := range used {
		if !live[n] && !recorded[n] {
			t.Errorf("%s names %s: no server exposes it", where, n)
		}
	}
}

// scrape starts a server of o on loopback and returns the metric names of
// its /metrics.
func scrape(t *testing.T, o server.Options) map[string]bool {
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
	out := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			out[line[:i]] = true
		}
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
// it, and names a setting this kernel has (conntrack's only once its module
// is loaded).
func TestSysctl(t *testing.T) {
	b, err := os.ReadFile("sysctl/90-hongbao.conf")
	if err != nil {
		t.Fatal(err)
	}
	setting := regexp.MustCompile(`^([a-z0-9_.-]+) = (\S+( \S+)*)$`)
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
		if i == 0 || !strings.HasPrefix(lines[i-1], "#") {
			t.Errorf("line %d: %s has no reason above it", i+1, m[1])
		}
		path := filepath.Join("/proc/sys", strings.ReplaceAll(m[1], ".", "/"))
		if _, err := os.Stat(path); err != nil && !strings.HasPrefix(m[1], "net.netfilter.") {
			t.Errorf("line %d: %s: %v", i+1, m[1], err)
		}
	}
	if n < 8 {
		t.Fatalf("%d settings", n)
	}
}
