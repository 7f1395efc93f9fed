package ingress_test

import (
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/proto"
)

func TestOptionsDefaults(t *testing.T) {
	var o ingress.Options
	o.EnsureDefaults()
	if o.Loops != runtime.GOMAXPROCS(0) || o.LoginTimeout != ingress.DefaultLoginTimeout ||
		o.ReadBudget != ingress.DefaultReadBudget || o.Logger == nil || o.Now == nil {
		t.Errorf("defaults not filled in: %+v", o)
	}
	if runtime.GOOS == "linux" && o.Mode != ingress.ModeEpoll || runtime.GOOS != "linux" && o.Mode != ingress.ModeNetpoll {
		t.Errorf("default Mode %q on %s", o.Mode, runtime.GOOS)
	}
}

func TestOptionsValidate(t *testing.T) {
	f := func(o ingress.Options, want ...string) {
		t.Helper()
		o.EnsureDefaults()
		err := o.Validate()
		if len(want) == 0 {
			if err != nil {
				t.Errorf("Validate(%+v) = %v; want nil", o, err)
			}
			return
		}
		if err == nil {
			t.Errorf("Validate(%+v) = nil; want errors naming %q", o, want)
			return
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("got %q; want it to name %q", err, w)
			}
		}
	}
	ok := ingress.Options{Listen: []string{":0"}, Bare: true}
	f(ok)
	f(ingress.Options{}, "no Listen", "Bus is nil")
	bad := ok
	bad.Listen = []string{""}
	f(bad, "Listen[0]")
	bad = ok
	bad.Mode = "kqueue"
	f(bad, `Mode="kqueue"`)
	bad = ok
	bad.Loops, bad.MaxConns, bad.LoginTimeout, bad.ReadBudget = -1, -2, -time.Second, ingress.MaxReadBudget+1
	f(bad, "Loops=-1", "MaxConns=-2", "LoginTimeout=-1s", "ReadBudget=16777217")
	bad = ok
	bad.Bare = false
	f(bad, "Bus is nil")
}

func TestNewErrors(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		if _, err := ingress.New(withMode(ingress.Options{Mode: mode, Bare: true, Listen: []string{"no-such-host.invalid:1"}})); err == nil {
			t.Error("New with an unresolvable address succeeded")
		}
		ing := serve(t, ingress.Options{Mode: mode, Bare: true})
		taken := ing.Addrs()[0].String()
		if _, err := ingress.New(withMode(ingress.Options{Mode: mode, Bare: true, Listen: []string{taken}})); err == nil {
			t.Errorf("New on the taken address %s succeeded", taken)
		}
	})
}

func TestReusePort(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		a := serve(t, ingress.Options{Mode: mode, Bare: true, ReusePort: true})
		o := ingress.Options{Mode: mode, Bare: true, ReusePort: true, Listen: []string{a.Addrs()[0].String()}}
		b, err := ingress.New(withMode(o))
		if err != nil {
			t.Fatalf("a second listener on the same port: %v", err)
		}
		defer b.Close()
		if b.Addrs()[0].(*net.TCPAddr).Port != a.Addrs()[0].(*net.TCPAddr).Port {
			t.Errorf("ports %v and %v differ", a.Addrs()[0], b.Addrs()[0])
		}
	})
}

func TestListenAddresses(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		ing, err := ingress.New(withMode(ingress.Options{Mode: mode, Bare: true, Listen: []string{"127.0.0.1:0", ":0"}}))
		if err != nil {
			t.Fatal(err)
		}
		defer ing.Close()
		as := ing.Addrs()
		if len(as) != 2 || as[0].(*net.TCPAddr).Port == 0 || as[1].(*net.TCPAddr).Port == 0 {
			t.Fatalf("Addrs() = %v; want two bound ports", as)
		}
		if err := ing.Start(); err != nil {
			t.Fatal(err)
		}
		if err := ing.Start(); err == nil {
			t.Error("a second Start succeeded")
		}
		for _, a := range as {
			port := a.(*net.TCPAddr).Port
			nc, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				t.Fatalf("dial %v: %v", a, err)
			}
			c := &client{t: t, nc: nc}
			c.send(loginFrame(1, 1))
			c.expect(proto.LoginAck, 1)
			nc.Close()
		}
	})
}
