package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// Requests and broadcasts between gateways (the stats, the campaigns'
// parts): a gateway asks on <prefix>.gw.<node>.ask.<name>, and each other
// gateway answers on its own <prefix>.gw.<it>.answer.<node>, with the
// request's id in askHeader; a broadcast carries no id and gets no answer.
// Answers ride the answering gateway's own subject rather than an inbox, so
// that the receiver knows who answered (identity.go).

// askHeader carries a request's id, from the request to its answers.
const askHeader = "Hongbao-Ask"

// toHeader names the one gateway a request is for (RequestOne): the others
// pass it over.
const toHeader = "Hongbao-To"

// Answer is one gateway's answer to a Request.
type Answer struct {
	Node int
	Data []byte
}

// asking is a request waiting for its answers: the gateways asked, and
// those that answered.
type asking struct {
	want    map[int]bool // asked, not answered yet
	answers chan Answer  // room for one answer from every gateway asked
}

// Request sends data to every other gateway that is up as request name,
// and gathers their answers until every one has answered or ctx ends.
func (n *Node) Request(ctx context.Context, name string, data []byte) ([]Answer, error) {
	return n.request(ctx, name, data, -1)
}

// ErrNoAnswer is RequestOne's error when the gateway asked did not answer
// before ctx ended.
var ErrNoAnswer = errors.New("cluster: the gateway asked did not answer in time")

// ErrUnheard is RequestOne's error when the gateway asked is not heard
// (within the lease): at the request, or while its answer was awaited.
var ErrUnheard = errors.New("cluster: the gateway asked is not heard from")

// RequestOne sends data to gateway node alone as request name and returns
// its answer: ErrUnheard if node is not heard from (within the lease) when
// asked, or stops being heard before it answers — it died or paused, and
// will not answer; ErrNoAnswer if none came before ctx ended.
func (n *Node) RequestOne(ctx context.Context, node int, name string, data []byte) ([]byte, error) {
	if node < 0 || node >= n.o.Nodes || node == n.o.Node {
		return nil, fmt.Errorf("cluster: no other gateway %d to ask", node)
	}
	if !n.isHeard(node) {
		return nil, fmt.Errorf("%w: gateway %d", ErrUnheard, node)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() { // the answer is given up on once its gateway goes unheard
		t := time.NewTicker(beatEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if !n.isHeard(node) {
					cancel(fmt.Errorf("%w: gateway %d, while its answer was awaited", ErrUnheard, node))
					return
				}
			}
		}
	}()
	out, err := n.request(ctx, name, data, node)
	if err == nil && len(out) == 0 && errors.Is(context.Cause(ctx), ErrUnheard) {
		return nil, context.Cause(ctx)
	}
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, ErrNoAnswer
	}
	return out[0].Data, nil
}

// request is Request, or RequestOne of gateway to (≥ 0).
func (n *Node) request(ctx context.Context, name string, data []byte, to int) ([]Answer, error) {
	a := &asking{want: map[int]bool{}}
	for node := range n.o.Nodes {
		if node != n.o.Node && (to < 0 && n.up(node) || node == to) {
			a.want[node] = true
		}
	}
	a.answers = make(chan Answer, len(a.want))
	n.askMu.Lock()
	n.askID++
	id := n.askID
	n.asks[id] = a
	n.askMu.Unlock()
	defer func() {
		n.askMu.Lock()
		delete(n.asks, id)
		n.askMu.Unlock()
	}()
	m := nats.NewMsg(n.own(subAsk + "." + name))
	m.Data = data
	m.Header.Set(askHeader, strconv.FormatUint(id, 10))
	if to >= 0 {
		m.Header.Set(toHeader, strconv.Itoa(to))
	}
	if err := n.nc.PublishMsg(m); err != nil {
		return nil, err
	}
	var out []Answer
	for len(out) < cap(a.answers) {
		select {
		case r := <-a.answers:
			out = append(out, r)
		case <-ctx.Done():
			return out, nil
		}
	}
	return out, nil
}

// answered takes an answer to one of this gateway's requests: from a
// gateway asked, once.
func (n *Node) answered(m *nats.Msg) {
	from, ok := n.peerSender(m.Subject)
	if !ok {
		n.forged.add(n.log, ForgedSubject, -1, "an answer on "+m.Subject)
		return
	}
	id, err := strconv.ParseUint(m.Header.Get(askHeader), 10, 64)
	n.askMu.Lock()
	defer n.askMu.Unlock()
	if err != nil || id == 0 || id > n.askID {
		n.forged.add(n.log, ForgedAnswer, from, "an answer to no request of this gateway's")
		return
	}
	a := n.asks[id]
	if a == nil {
		return // came after its request gave up waiting
	}
	if !a.want[from] {
		n.forged.add(n.log, ForgedAnswer, from, "an answer from a gateway not asked, or a second one")
		return
	}
	delete(a.want, from)
	a.answers <- Answer{Node: from, Data: m.Data}
}

// Serve answers the requests name of the other gateways with fn's reply
// (nil: none), and hands their broadcasts name to fn. fn learns which
// gateway sent them; this gateway's own are not handed to it. fn runs on
// the subscription's goroutine, one request at a time.
func (n *Node) Serve(name string, fn func(from int, data []byte) []byte) error {
	return n.serve(name, fn, false)
}

// ServeEach is Serve with fn run on a goroutine of each request's own, for
// requests that wait (on JetStream, on a SET) and must not hold up the
// next.
func (n *Node) ServeEach(name string, fn func(from int, data []byte) []byte) error {
	return n.serve(name, fn, true)
}

func (n *Node) serve(name string, fn func(from int, data []byte) []byte, each bool) error {
	sub, err := n.nc.Subscribe(n.anyGateway(subAsk+"."+name), func(m *nats.Msg) {
		from, ok := n.peerSender(m.Subject)
		if !ok {
			if node, mine := n.sender(m.Subject); !mine || node != n.o.Node {
				n.forged.add(n.log, ForgedSubject, -1, "a request on "+m.Subject)
			}
			return
		}
		if to := m.Header.Get(toHeader); to != "" && to != strconv.Itoa(n.o.Node) {
			return // another gateway's
		}
		answer := func() {
			r := fn(from, m.Data)
			id := m.Header.Get(askHeader)
			if r == nil || id == "" {
				return
			}
			a := nats.NewMsg(n.own(subAnswer + "." + strconv.Itoa(from)))
			a.Data = r
			a.Header.Set(askHeader, id)
			n.nc.PublishMsg(a)
		}
		if each {
			go answer()
		} else {
			answer()
		}
	})
	if err == nil {
		n.subs = append(n.subs, sub)
	}
	return err
}

// Broadcast sends data to the other gateways' Serve of name.
func (n *Node) Broadcast(name string, data []byte) error {
	return n.nc.Publish(n.own(subAsk+"."+name), data)
}

// Refused counts and logs a request or broadcast from gateway from that
// the server dropped for its content (a campaign without the admin
// token's proof, one naming another sender).
func (n *Node) Refused(from int, why string) { n.forged.add(n.log, ForgedAsk, from, why) }
