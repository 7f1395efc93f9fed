// Command jsadmin is the operator's tool for a cluster's JetStream (gateways
// with -journal jetstream): it creates the journal's stream and every
// gateway's snapshot bucket, with an operator's NATS identity, before the
// first gateway starts, and checks them after. Gateways never create or
// change them: their NATS users may not (deploy/nats/nats-server-js.conf),
// and a gateway refuses to start on a stream or bucket that differs from
// what it expects, naming the difference (docs/CLUSTER.md, Failover).
//
//	jsadmin provision -nats URL -nats-user admin -sets 32 -gateways 3 -replicas 3 [-update]
//	jsadmin check     -nats URL -nats-user admin -sets 32 -gateways 3 -replicas 3
//	jsadmin stepdown  -nats URL -nats-user admin -sets 32 -gateways 3 -server n1
//
// stepdown is for a NATS server's planned maintenance: the stream and
// buckets it leads hand their leadership to another server before it stops,
// in a fraction of a second, instead of an election of seconds after.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/buildinfo"
	"github.com/hongbao-io/hongbao/cluster"
	"github.com/hongbao-io/hongbao/jsjournal"
)

// passEnv holds the -nats-user's password when -nats-password-file is not given.
const passEnv = "HONGBAO_NATS_PASSWORD"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the command: its exit status, 0 done, 1 failed or a difference
// found, 2 a bad command line.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "provision" && args[0] != "check" && args[0] != "stepdown" && args[0] != "-version") {
		fmt.Fprint(stderr, usage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			return 0
		}
		return 2
	}
	if args[0] == "-version" {
		fmt.Fprintln(stdout, buildinfo.Read().Line("jsadmin"))
		return 0
	}
	cmd := args[0]
	fs := flag.NewFlagSet("jsadmin "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		url      = fs.String("nats", "", "the NATS server `URLs`, comma-separated (required)")
		a        cluster.Auth
		passFile = fs.String("nats-password-file", "", "read the -nats-user password from this `file` (else $"+passEnv+")")
		l        = jsjournal.Layout{Prefix: jsjournal.DefaultPrefix}
		update   = fs.Bool("update", false, "provision: change what differs where JetStream can (the replicas, the limits, the metadata; never -sets), instead of refusing it")
		timeout  = fs.Duration("timeout", 30*time.Second, "give up after this `duration`")
		leader   = fs.String("server", "", "stepdown: the NATS server's `name` (its server_name) about to stop: what it leads is handed to another")
	)
	fs.StringVar(&a.User, "nats-user", "", "the operator's NATS `user` (deploy/nats: admin)")
	fs.StringVar(&a.Creds, "nats-creds", "", "the operator's NATS identity as a .creds `file`")
	fs.StringVar(&a.NKey, "nats-nkey", "", "the operator's NATS identity as a `file` holding an nkey seed")
	fs.StringVar(&a.CA, "nats-ca", "", "connect over TLS, verifying the servers against the CAs in this PEM `file`")
	fs.StringVar(&a.Cert, "nats-cert", "", "present this PEM client certificate `file` (mutual TLS; with -nats-key)")
	fs.StringVar(&a.Key, "nats-key", "", "the private key `file` of -nats-cert")
	fs.IntVar(&l.Sets, "sets", 0, "the cluster's SETs: every gateway's -sets (required; fixed for the stream's life)")
	fs.IntVar(&l.Gateways, "gateways", 0, "the gateways' node numbers, 0..N-1: every gateway's -node I/N's N (required): one snapshot bucket each")
	fs.IntVar(&l.Replicas, "replicas", 3, "copies JetStream keeps of the stream and each bucket: every gateway's -replicas (1 on a single NATS server)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var bad []string
	if *url == "" {
		bad = append(bad, "-nats is required")
	}
	if l.Sets < 1 || l.Gateways < 1 {
		bad = append(bad, "-sets and -gateways are required, each at least 1")
	}
	if cmd != "provision" && *update {
		bad = append(bad, "-update is provision's")
	}
	if (cmd == "stepdown") != (*leader != "") {
		bad = append(bad, "-server goes with stepdown, and stepdown needs it")
	}
	if strings.Contains(*url, "@") {
		bad = append(bad, "-nats: no credentials in the URL (they show in ps): -nats-user with -nats-password-file or $"+passEnv)
	}
	if len(bad) > 0 {
		fmt.Fprintf(stderr, "jsadmin %s: %s\n", cmd, strings.Join(bad, "; "))
		return 2
	}
	if a.User != "" {
		pass, err := password(*passFile)
		if err != nil {
			fmt.Fprintf(stderr, "jsadmin %s: %v\n", cmd, err)
			return 2
		}
		a.Password = pass
	}
	opts, err := a.Options()
	if err != nil {
		fmt.Fprintf(stderr, "jsadmin %s: %v\n", cmd, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	nc, err := nats.Connect(*url, append(opts, nats.Name("hongbao jsadmin"))...)
	if err != nil {
		fmt.Fprintf(stderr, "jsadmin %s: connecting to %s: %v\n", cmd, *url, err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintf(stderr, "jsadmin %s: %v\n", cmd, err)
		return 1
	}
	if cmd == "stepdown" {
		if err := stepdown(ctx, nc, js, l, *leader, stdout); err != nil {
			fmt.Fprintf(stderr, "jsadmin stepdown: %v\n", err)
			return 1
		}
		return 0
	}
	if cmd == "check" {
		if err := jsjournal.Check(ctx, js, l); err != nil {
			fmt.Fprintf(stderr, "jsadmin check: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "stream %s and %d buckets: as a cluster of %d SETs, %d gateways, %d replicas needs them\n", l.Stream(), l.Gateways, l.Sets, l.Gateways, l.Replicas)
		return 0
	}
	did, err := jsjournal.Provision(ctx, js, l, *update)
	for _, d := range did {
		fmt.Fprintln(stdout, d)
	}
	if err != nil {
		fmt.Fprintf(stderr, "jsadmin provision: %v\n", err)
		return 1
	}
	if len(did) == 0 {
		fmt.Fprintf(stdout, "stream %s and %d buckets: already as asked\n", l.Stream(), l.Gateways)
	}
	return 0
}

// password reads the -nats-user password from file, else from $HONGBAO_NATS_PASSWORD.
func password(file string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("-nats-password-file: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	if p, ok := os.LookupEnv(passEnv); ok {
		return p, nil
	}
	return "", fmt.Errorf("-nats-user needs its password: -nats-password-file or $%s", passEnv)
}

const usage = `Usage: jsadmin provision|check|stepdown [flags]

The operator's tool for a hongbao cluster's JetStream (gateways run with -journal jetstream):

  provision   create the journal's stream (hongbao_journal) and a snapshot bucket per gateway
              (hongbao_snapshots_<node>), or check them if they exist; -update changes what
              differs where JetStream can
  check       compare them with what the cluster needs, naming every difference; change nothing
  stepdown    before NATS server -server NAME stops for maintenance: the stream and buckets it
              leads elect another leader now (JetStream's leader stepdown), so that no money
              waits for an election after it stops

Run it with an operator's NATS identity (deploy/nats/nats-server-js.conf: user admin), before
the first gateway starts, and again with -update after changing -replicas. Gateways may not
create or change the stream and buckets, and refuse to start on ones that differ.

Flags (the same for both; jsadmin provision -h lists them):
  -nats URLs -nats-user USER [-nats-password-file FILE] -sets N -gateways N [-replicas R] [-update]
  [-server NAME]

Exit status: 0 done, 1 failed or a difference found, 2 a bad command line.
`

// stepdown hands the leadership of every stream of layout l that server
// leads (the journal, the snapshot buckets) to another server, and waits
// until each has a leader elsewhere.
// askStepdown asks stream name's leader to hand its leadership to a
// replica that is current, if one is (else to any the servers choose).
func askStepdown(ctx context.Context, nc *nats.Conn, name string, ci *jetstream.ClusterInfo) error {
	var req []byte
	for _, p := range ci.Replicas {
		if p.Current && !p.Offline {
			req = fmt.Appendf(nil, `{"placement":{"preferred":%q}}`, p.Name)
			break
		}
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(qctx, "$JS.API.STREAM.LEADER.STEPDOWN."+name, req)
	if err != nil {
		return fmt.Errorf("stream %s: stepdown: %w", name, err)
	}
	var resp struct {
		Success bool `json:"success"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil || !resp.Success {
		why := string(msg.Data)
		if resp.Error != nil {
			why = resp.Error.Description
		}
		return fmt.Errorf("stream %s: stepdown refused: %s", name, why)
	}
	return nil
}

func stepdown(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, l jsjournal.Layout, server string, out io.Writer) error {
	names := []string{l.Stream()}
	for g := range l.Gateways {
		names = append(names, "OBJ_"+l.Bucket(g)) // an object store is a stream of that name
	}
	moved := 0
	for _, name := range names {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
		info := st.CachedInfo()
		if info.Cluster == nil || info.Cluster.Leader != server {
			continue
		}
		start := time.Now()
		if err := askStepdown(ctx, nc, name, info.Cluster); err != nil {
			return err
		}
		asked := time.Now()
		for {
			// Each question bounded: one asked as the leadership moves may
			// never be answered.
			qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
			info, err := st.Info(qctx)
			qcancel()
			if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && info.Cluster.Leader != server {
				fmt.Fprintf(out, "stream %s: leader %s, was %s (%v)\n", name, info.Cluster.Leader, server, time.Since(start).Round(time.Millisecond))
				break
			}
			// Elected again (its peers were behind), or the request lost:
			// ask again.
			if err == nil && info.Cluster != nil && info.Cluster.Leader == server && time.Since(asked) > 2*time.Second {
				if err := askStepdown(ctx, nc, name, info.Cluster); err != nil {
					return err
				}
				asked = time.Now()
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("stream %s: no new leader: %w", name, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
		moved++
	}
	if moved == 0 {
		fmt.Fprintf(out, "server %s leads none of the cluster's %d streams: it may stop\n", server, len(names))
	}
	return nil
}
