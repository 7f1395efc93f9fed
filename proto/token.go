package proto

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
)

// TokenLen is the size of an auth token: expiry u64 (unix seconds) followed by
// HMAC-SHA256(secret, user u32 ‖ expiry u64).
const TokenLen = 8 + sha256.Size

// MintToken appends to dst the token that lets user log in until expiry (unix seconds,
// inclusive) on a server with this secret. It builds a fresh HMAC on every call; it is meant
// for clients and tests, not a hot path.
func MintToken(dst, secret []byte, user uint32, expiry int64) []byte {
	mac := hmac.New(sha256.New, secret)
	var msg [12]byte
	be.PutUint32(msg[:], user)
	be.PutUint64(msg[4:], uint64(expiry))
	mac.Write(msg[:])
	dst = be.AppendUint64(dst, uint64(expiry))
	return mac.Sum(dst)
}

// Verifier checks LOGIN tokens against one secret without allocating: it keys its HMAC once and
// resets it per token.
//
// A Verifier is not safe for concurrent use; keep one per event loop. There is no useful zero
// value: build it with NewVerifier. A server without a secret does not verify at all (any token
// is ignored), so it needs no Verifier.
type Verifier struct {
	mac hash.Hash
	msg [12]byte // user u32 ‖ expiry u64: kept here so the interface call does not move it to the heap
	sum [sha256.Size]byte
}

// NewVerifier returns a Verifier for secret. It copies what it needs of secret.
func NewVerifier(secret []byte) *Verifier {
	return &Verifier{mac: hmac.New(sha256.New, secret)}
}

// Verify reports whether token is a valid token for user at nowUnix (unix seconds): TokenLen
// bytes, expiry ≥ nowUnix, and a MAC the secret produced, compared in constant time.
func (v *Verifier) Verify(user uint32, token []byte, nowUnix int64) bool {
	if len(token) != TokenLen {
		return false
	}
	expiry := be.Uint64(token)
	if nowUnix > 0 && expiry < uint64(nowUnix) {
		return false
	}
	be.PutUint32(v.msg[:], user)
	copy(v.msg[4:], token[:8])
	v.mac.Reset()
	v.mac.Write(v.msg[:])
	return hmac.Equal(v.mac.Sum(v.sum[:0]), token[8:])
}
