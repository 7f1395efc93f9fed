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
// it (deploy/nats): its name, a fresh password in a file of the run's
// directory, and the subjects it may publish and subscribe to.
type Identity struct {
	Name, Password, File string
	Publish, Subscribe   []string
}

// NewIdentities makes the identities gw0…gw<n-1> of n gateways, each with
// perms(node)'s permissions and its password in dir.
func NewIdentities(dir string, n int, perms func(node int) (publish, subscribe []string)) ([]Identity, error) {
	var ids []Identity
	for node := range n {
		pass := make([]byte, 16)
		rand.Read(pass)
		id := Identity{Name: fmt.Sprintf("gw%d", node), Password: hex.EncodeToString(pass)}
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

// BuildBinaries builds the server (under the race detector with race), the
// load client and nats-server (from its module) into dir from the module at
// root: the binaries a tool's tests run.
func BuildBinaries(root, dir string, race bool) (server, client string, err error) {
	build := func(pkg, out string, race bool) error {
		args := []string{"build", "-o", filepath.Join(dir, out)}
		if race {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %v: %v\n%s", args, err, b)
		}
		return nil
	}
	if err := build("./cmd/server", "server", race); err != nil {
		return "", "", err
	}
	if err := build("./cmd/loadclient", "loadclient", false); err != nil {
		return "", "", err
	}
	if err := build(NATSServerModule, "nats-server", false); err != nil {
		return "", "", err
	}
	return filepath.Join(dir, "server"), filepath.Join(dir, "loadclient"), nil
}

// NATSServerModule is the package of the nats-server binary: make build
// builds it from the module the gateways' tests embed, so nothing needs
// installing.
const NATSServerModule = "github.com/nats-io/nats-server/v2"
