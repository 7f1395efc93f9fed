package cluster

import (
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// InboxPrefix is the prefix of node's inboxes on its JetStream connection:
// under its own subjects, so that only it may read the JetStream API's
// answers to it (Permissions).
func InboxPrefix(prefix string, node int) string {
	return prefix + ".gw." + strconv.Itoa(node) + ".inbox"
}

// ConnectJetStream dials the connection a gateway's journal and claims go
// over, apart from its crossings': under a's identity, with its own
// inboxes, reconnecting without end, its server pinged so that a silent
// connection is noticed within the lease (PingInterval). A publish while it reconnects is
// buffered and sent after, as a journal round waits out a NATS server's
// restart; the journal bounds the wait for its acknowledgement.
func ConnectJetStream(url, prefix string, node int, a Auth, lease time.Duration) (*nats.Conn, error) {
	opts, err := a.options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.Name(fmt.Sprintf("hongbao gateway %d journal", node)),
		nats.CustomInboxPrefix(InboxPrefix(prefix, node)),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Timeout(5*time.Second),
		nats.PingInterval(PingInterval(lease)), nats.MaxPingsOutstanding(MaxPingsOut))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("cluster: NATS %s (the journal's connection): %w", url, err)
	}
	return nc, nil
}
