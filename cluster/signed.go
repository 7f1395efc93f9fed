package cluster

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// SignedOp carries an op of the admin's between gateways (a campaign's
// part, a move) with the proof that whoever sent it holds the admin token:
// such control over NATS takes the same authority as the admin API, so
// every gateway of a cluster has the same -admin-token.
type SignedOp struct {
	Op    json.RawMessage `json:"op"`
	Proof string          `json:"proof,omitempty"` // hex HMAC-SHA256 of Op under the admin token; none without one
}

// Proof is the HMAC of op under key, "" without a key.
func Proof(key, op []byte) string {
	if len(key) == 0 {
		return ""
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("hongbao campaign\x00"))
	m.Write(op)
	return hex.EncodeToString(m.Sum(nil))
}
