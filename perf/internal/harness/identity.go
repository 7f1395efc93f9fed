package harness

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Identity is a gateway's NATS user as an operator's configuration makes
// it (deploy/nats), its fresh password in File too.
type Identity struct {
	NATSUser
	File string
}

// NewIdentities makes the identities gw0…gw<n-1> of n gateways, each with
// perms(node)'s permissions and its password in dir.
func NewIdentities(dir string, n int, perms func(node int) (publish, subscribe []string)) ([]Identity, error) {
	var ids []Identity
	for node := range n {
		pass := make([]byte, 16)
		rand.Read(pass)
		id := Identity{NATSUser: NATSUser{Name: fmt.Sprintf("gw%d", node), Password: hex.EncodeToString(pass)}}
		id.Publish, id.Subscribe = perms(node)
		id.File = filepath.Join(dir, id.Name+".nats-password")
		if err := os.WriteFile(id.File, []byte(id.Password+"\n"), 0o600); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// IdentityArgs gives the flags that make gateway node present its identity
// (Cluster.Auth).
func IdentityArgs(ids []Identity) func(node int) []string {
	return func(node int) []string {
		return []string{"-nats-user", ids[node].Name, "-nats-password-file", ids[node].File}
	}
}

// BuildBinaries builds into dir, from the module at root, the binaries a
// tool's tests run: the server (under the race detector with race), the
// load client and nats-server (from its module, as make build does).
func BuildBinaries(root, dir string, race bool) (server, client string, err error) {
	for _, b := range []struct{ pkg, out string }{{"./cmd/server", "server"}, {"./cmd/loadclient", "loadclient"}, {"github.com/nats-io/nats-server/v2", "nats-server"}} {
		args := []string{"build", "-o", filepath.Join(dir, b.out)}
		if race && b.out == "server" {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, b.pkg)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go %v: %v\n%s", args, err, out)
		}
	}
	return filepath.Join(dir, "server"), filepath.Join(dir, "loadclient"), nil
}
