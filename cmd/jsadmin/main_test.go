package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/cluster"
	"github.com/hongbao-io/hongbao/internal/embednats"
)

// TestProvisionAndCheck: against a NATS server that lets in the operator
// and a gateway, each with its permissions: check names what is missing;
// provision, as the operator, creates it, and again does nothing; check then
// passes; a gateway's identity may not provision; a stream changed behind
// the operator's back fails check, naming what differs, and provision
// -update mends it.
func TestProvisionAndCheck(t *testing.T) {
	opub, osub := cluster.OperatorPermissions()
	gpub, gsub := cluster.JetStreamPermissions("hongbao", 0, 2)
	ns, err := embednats.StartUsersJetStream(t.TempDir(), 0, []embednats.User{
		{Name: "admin", Password: "apw", Publish: opub, Subscribe: osub},
		{Name: "gw0", Password: "gpw", Publish: gpub, Subscribe: gsub},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	jsadmin := func(user, pass string, args ...string) (int, string, string) {
		t.Helper()
		t.Setenv(passEnv, pass)
		timeout := "10s"
		if user != "admin" {
			timeout = "500ms" // what its identity may not ask goes unanswered
		}
		var out, errs bytes.Buffer
		code := run(append(args, "-nats", ns.URL(), "-nats-user", user, "-sets", "8", "-gateways", "2", "-replicas", "1", "-timeout", timeout), &out, &errs)
		return code, out.String(), errs.String()
	}
	if code, _, errs := jsadmin("admin", "apw", "check"); code != 1 || !strings.Contains(errs, "missing") {
		t.Fatalf("check before provisioning: %d %q; want 1, naming what is missing", code, errs)
	}
	if code, _, errs := jsadmin("gw0", "gpw", "provision"); code != 1 {
		t.Fatalf("provision with a gateway's identity: %d %q; want refused", code, errs)
	}
	code, out, errs := jsadmin("admin", "apw", "provision")
	if code != 0 || strings.Count(out, "created") != 3 {
		t.Fatalf("provision: %d %q %q; want the stream and 2 buckets created", code, out, errs)
	}
	if code, out, _ := jsadmin("admin", "apw", "provision"); code != 0 || !strings.Contains(out, "already") {
		t.Fatalf("provision again: %d %q; want nothing to do", code, out)
	}
	if code, _, errs := jsadmin("admin", "apw", "check"); code != 0 {
		t.Fatalf("check: %d %q", code, errs)
	}

	nc, err := nats.Connect(ns.URL(), nats.UserInfo("admin", "apw"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "hongbao_journal")
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge = time.Hour
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := jsadmin("admin", "apw", "check"); code != 1 || !strings.Contains(errs, "limits") {
		t.Fatalf("check of a changed stream: %d %q; want 1, naming the limits", code, errs)
	}
	if code, out, errs := jsadmin("admin", "apw", "provision", "-update"); code != 0 || !strings.Contains(out, "updated") {
		t.Fatalf("provision -update: %d %q %q", code, out, errs)
	}
	if code, _, errs := jsadmin("admin", "apw", "check"); code != 0 {
		t.Fatalf("check once mended: %d %q", code, errs)
	}
	if code := run([]string{"provision", "-nats", "nats://u:p@127.0.0.1:1", "-sets", "8", "-gateways", "2"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Fatalf("credentials in the URL: exit %d; want 2", code)
	}
}

// TestStepdown: on a 3-server JetStream cluster, stepdown -server names the
// journal stream's leader and the stream has another leader when it
// returns; the buckets that server led too; a server that leads nothing is
// told so.
func TestStepdown(t *testing.T) {
	opub, osub := cluster.OperatorPermissions()
	c := embednats.StartTestJSCluster(t, 3, []embednats.User{{Name: "admin", Password: "apw", Publish: opub, Subscribe: osub}})
	t.Setenv(passEnv, "apw")
	jsadmin := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errs bytes.Buffer
		code := run(append(args, "-nats", c.URL(), "-nats-user", "admin", "-sets", "4", "-gateways", "2", "-replicas", "3"), &out, &errs)
		return code, out.String(), errs.String()
	}
	// The cluster elects its meta leader first: provisioning may wait for it.
	deadline := time.Now().Add(20 * time.Second)
	for code, out, errs := jsadmin("provision"); code != 0; code, out, errs = jsadmin("provision") {
		if time.Now().After(deadline) {
			t.Fatalf("provision: %d %q %q", code, out, errs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	nc, err := nats.Connect(c.URL(), nats.UserInfo("admin", "apw"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	leaderOf := func(stream string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, stream)
		if err != nil || st.CachedInfo().Cluster == nil {
			return ""
		}
		return st.CachedInfo().Cluster.Leader
	}
	var was string
	for deadline := time.Now().Add(20 * time.Second); was == ""; time.Sleep(100 * time.Millisecond) {
		if was = leaderOf("hongbao_journal"); was == "" && time.Now().After(deadline) {
			t.Fatal("the journal stream has no leader")
		}
	}
	code, out, errs := jsadmin("stepdown", "-server", was)
	if code != 0 || !strings.Contains(out, "stream hongbao_journal: leader ") {
		t.Fatalf("stepdown -server %s: %d %q %q", was, code, out, errs)
	}
	t.Logf("stepdown -server %s:\n%s", was, out)
	if now := leaderOf("hongbao_journal"); now == was || now == "" {
		t.Fatalf("the journal's leader after the stepdown: %q; want another than %s", now, was)
	}
	for _, name := range []string{"OBJ_hongbao_snapshots_0", "OBJ_hongbao_snapshots_1"} {
		if leaderOf(name) == was {
			t.Errorf("%s still led by %s", name, was)
		}
	}
	if code, out, _ := jsadmin("stepdown", "-server", "no-such-server"); code != 0 || !strings.Contains(out, "leads none") {
		t.Fatalf("stepdown of a server that leads nothing: %d %q", code, out)
	}
	if code, _, _ := jsadmin("check", "-server", was); code != 2 {
		t.Fatalf("-server without stepdown: exit %d; want 2", code)
	}
}
