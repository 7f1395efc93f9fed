package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/client/wire"
	"github.com/hongbao-io/hongbao/proto"
)

// An attack runs in a process of its own: this test binary started again
// with only TestHostileAttacker and the attack's name in its environment.
// In the server's process its goroutines would queue in the same Go
// scheduler as the server's loops and stages (a storm's thousands of
// goroutines ahead of every ingress loop woken from epoll_wait), which
// measures the scheduler, not the server; and the server's goroutines and
// descriptors could not be counted apart from the attacker's. The operating
// system shares the two cores between the processes as it would between a
// server and its clients.
//
// The attacker talks to the test on its stdout and stdin, one line each:
// "hostile-sync TAG" waits for the test to do what TAG asks (measure the
// server, say) and answer "ok"; "hostile-money SHAKE OPEN" reports the fen
// its clients read, for the ledger; every other line is its log.

const (
	attackerEnv  = "HONGBAO_ATTACKER" // the attack to run; unset: not an attacker process
	attackSrvEnv = "HONGBAO_ATTACK_SERVER"
	attackAdmEnv = "HONGBAO_ATTACK_ADMIN"
	attackSzEnv  = "HONGBAO_ATTACK_SIZES"
	syncLine     = "hostile-sync "
	moneyLine    = "hostile-money "
)

// attacker is what an attack works with, in the attacker process.
type attacker struct {
	t           *testing.T
	ts          *testServer // addr and admin only: the server is in the test's process
	sz          hostileSizes
	shake, open atomic.Uint64 // fen its clients read
	in          *bufio.Reader
}

// sync waits until the test has done what tag asks.
func (a *attacker) sync(tag string) {
	a.t.Helper()
	fmt.Printf("%s%s\n", syncLine, tag)
	if line, err := a.in.ReadString('\n'); err != nil || line != "ok\n" {
		a.t.Fatalf("sync %q: read %q, %v; want ok", tag, line, err)
	}
}

// TestHostileAttacker is the attacker process of TestHostileUnderLoad; run
// by itself, it skips.
func TestHostileAttacker(t *testing.T) {
	name := os.Getenv(attackerEnv)
	if name == "" {
		t.Skip("the attacker process of TestHostileUnderLoad")
	}
	a := &attacker{t: t, in: bufio.NewReader(os.Stdin),
		ts: &testServer{t: t, addr: os.Getenv(attackSrvEnv), admin: os.Getenv(attackAdmEnv), hc: &http.Client{Timeout: waitTime}}}
	if err := json.Unmarshal([]byte(os.Getenv(attackSzEnv)), &a.sz); err != nil {
		t.Fatalf("$%s: %v", attackSzEnv, err)
	}
	attack, ok := attacks[name]
	if !ok {
		t.Fatalf("no attack %q", name)
	}
	attack(a)
	fmt.Printf("%s%d %d\n", moneyLine, a.shake.Load(), a.open.Load())
}

// attack runs the attack name in an attacker process and waits for it.
func (l *steadyLoad) attack(name string, sz hostileSizes) {
	t := l.t
	t.Helper()
	var hook func(string)
	if h := attackHooks[name]; h != nil {
		hook = h(l, sz)
	}
	szs, _ := json.Marshal(sz)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHostileAttacker$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), attackerEnv+"="+name, attackSrvEnv+"="+l.ts.addr, attackAdmEnv+"="+l.ts.admin,
		attackSzEnv+"="+string(szs))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the attacker: %v", err)
	}
	var log []string
	money := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, syncLine):
			if hook != nil {
				hook(strings.TrimPrefix(line, syncLine))
			}
			io.WriteString(stdin, "ok\n")
		case strings.HasPrefix(line, moneyLine):
			var shake, open uint64
			if _, err := fmt.Sscan(strings.TrimPrefix(line, moneyLine), &shake, &open); err != nil {
				t.Errorf("attacker %s: %q: %v", name, line, err)
			}
			l.attShake.Add(shake)
			l.attOpen.Add(open)
			money = true
		case strings.HasPrefix(line, "    "): // its t.Log lines
			log = append(log, strings.TrimSpace(line))
		}
	}
	stdin.Close()
	err = cmd.Wait()
	for _, line := range log {
		t.Logf("attacker %s: %s", name, line)
	}
	if err != nil || !money {
		t.Errorf("attacker %s: %v (money reported: %v)\n%s", name, err, money, stderr.String())
	}
}

// attackDial connects to ts.
func attackDial(ts *testServer) (*wire.Conn, error) {
	return wire.Dial(ts.addr, waitTime)
}

// attackLogin connects and logs in as user with a good token.
func attackLogin(ts *testServer, user uint32) (*wire.Conn, error) {
	c, err := attackDial(ts)
	if err != nil {
		return nil, err
	}
	c.SetWriteDeadline(time.Now().Add(waitTime))
	if st, err := c.Login(user, tokenFor(user), waitTime); err != nil || st != proto.LoginOK {
		c.Close()
		return nil, fmt.Errorf("LOGIN user %d: status %d, %v", user, st, err)
	}
	return c, nil
}
