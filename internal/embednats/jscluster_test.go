package embednats_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/internal/embednats"
)

// retryJS calls f until it succeeds, failing t at the deadline with f's last error.
func retryJS(t *testing.T, what string, limit time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestJSClusterFailover forms a 3-node cluster with a user allowed JetStream's API and one
// subject tree, creates a stream of 3 replicas, publishes, kills the stream's leader,
// publishes again (acknowledged by the two left, a quorum), restarts the node on its ports
// and store, and waits until it is a current replica holding both messages.
func TestJSClusterFailover(t *testing.T) {
	start := time.Now()
	users := []embednats.User{{Name: "gw", Password: "pw", Publish: []string{"$JS.API.>", "j.>"}, Subscribe: []string{"_INBOX.>"}}}
	c := embednats.StartTestJSCluster(t, 3, users)
	if c.Len() != 3 || len(c.URLs()) != 3 {
		t.Fatalf("%d nodes, URLs %v; want 3", c.Len(), c.URLs())
	}
	formed := time.Since(start)
	for i := range c.Len() {
		srv := c.Server(i)
		if cfg := srv.JetStreamConfig(); cfg == nil || !cfg.SyncAlways || cfg.StoreDir != filepath.Join(c.Dir(i), "jetstream") || !srv.JetStreamIsClustered() || srv.Name() != c.Name(i) {
			t.Errorf("node %d: JetStream %+v, clustered %v, name %q; want synced always under %s/jetstream, clustered, named %s",
				i, cfg, srv.JetStreamIsClustered(), srv.Name(), c.Dir(i), c.Name(i))
		}
	}
	nc, err := nats.Connect(c.URL(), nats.UserInfo("gw", "pw"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nats.Connect(c.NodeURL(0), nats.UserInfo("gw", "wrong")); err == nil {
		t.Error("connected with a wrong password; want the users only")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := func(f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return f(ctx)
	}
	var stream jetstream.Stream
	retryJS(t, "create an R3 stream", 20*time.Second, func() error {
		return call(func(ctx context.Context) (err error) {
			stream, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "J", Subjects: []string{"j.>"}, Replicas: 3, Storage: jetstream.FileStorage})
			return err
		})
	})
	publish := func(subj string, want uint64) {
		t.Helper()
		retryJS(t, "publish "+subj, 20*time.Second, func() error {
			return call(func(ctx context.Context) error {
				ack, err := js.Publish(ctx, subj, []byte(subj))
				if err == nil && ack.Sequence != want {
					t.Fatalf("%s acknowledged as sequence %d; want %d", subj, ack.Sequence, want)
				}
				return err
			})
		})
	}
	publish("j.1", 1)
	var leader string
	retryJS(t, "the stream's leader", 10*time.Second, func() error {
		return call(func(ctx context.Context) error {
			info, err := stream.Info(ctx)
			if err != nil {
				return err
			}
			if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
				return errors.New("no leader with 2 replicas yet")
			}
			leader = info.Cluster.Leader
			return nil
		})
	})
	k := -1
	for i := range c.Len() {
		if c.Name(i) == leader {
			k = i
		}
	}
	if k < 0 {
		t.Fatalf("stream leader %q is none of the nodes", leader)
	}
	ready := time.Since(start)

	c.Kill(k)
	if c.Server(k) != nil {
		t.Fatalf("node %d still has a server after Kill", k)
	}
	// The stream's files, where Restart finds them: the store under the root, of the global
	// account, where users without accounts are.
	store := filepath.Join(c.Dir(k), "jetstream", "$G", "streams", "J")
	if _, err := os.Stat(store); err != nil {
		t.Fatalf("node %d's stream store: %v", k, err)
	}
	killed := time.Now()
	publish("j.2", 2) // the two left elect a leader and acknowledge
	reelected := time.Since(killed)

	if err := c.Restart(k); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(k); err == nil {
		t.Error("Restart of a running node: no error")
	}
	restarted := time.Now()
	retryJS(t, "the restarted node a current replica", 20*time.Second, func() error {
		return call(func(ctx context.Context) error {
			info, err := stream.Info(ctx)
			if err != nil {
				return err
			}
			if info.State.Msgs != 2 {
				return errors.New("not 2 messages")
			}
			peers := map[string]bool{info.Cluster.Leader: true}
			for _, p := range info.Cluster.Replicas {
				peers[p.Name] = p.Current && !p.Offline && p.Lag == 0
			}
			if !peers[c.Name(k)] {
				return errors.New(c.Name(k) + " not a current replica yet")
			}
			return nil
		})
	})
	t.Logf("cluster formed in %v, stream ready in %v; leader %s killed, a new one acknowledged in %v; restarted, current in %v; %v in all",
		formed.Round(time.Millisecond), ready.Round(time.Millisecond), leader, reelected.Round(time.Millisecond),
		time.Since(restarted).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
