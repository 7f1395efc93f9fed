package proto_test

import (
	"encoding/hex"
	"math"
	"testing"

	"github.com/hongbao-io/hongbao/proto"
)

func TestMintTokenWireBytes(t *testing.T) {
	// Computed independently: python3 -c "import hmac,hashlib,struct;
	//   print(hmac.new(b'secret', struct.pack('>IQ', 42, 1700000000), hashlib.sha256).hexdigest())"
	const want = "000000006553f100" + "c182925b515b1a71d8704531248807bc61953428f024b7354f5d7917ea42d435"
	got := proto.MintToken([]byte("pre"), []byte("secret"), 42, 1700000000)
	if g := hex.EncodeToString(got); g != hex.EncodeToString([]byte("pre"))+want {
		t.Errorf("got %s; want 707265%s", g, want)
	}
	if len(got) != 3+proto.TokenLen {
		t.Errorf("got %d token bytes; want TokenLen = %d", len(got)-3, proto.TokenLen)
	}
}

func TestVerify(t *testing.T) {
	secret := []byte("secret")
	const user, expiry = 42, 1700000000
	token := proto.MintToken(nil, secret, user, expiry)
	v := proto.NewVerifier(secret)
	f := func(name string, user uint32, tok []byte, now int64, want bool) {
		t.Helper()
		if got := v.Verify(user, tok, now); got != want {
			t.Errorf("%s: got %v; want %v", name, got, want)
		}
	}
	flip := func(i int, bit byte) []byte {
		b := append([]byte(nil), token...)
		b[i] ^= bit
		return b
	}
	f("valid", user, token, expiry-3600, true)
	f("valid at its expiry second", user, token, expiry, true)
	f("valid again after a rejection", user, token, expiry, true)
	f("expired", user, token, expiry+1, false)
	f("wrong user", user+1, token, expiry, false)
	f("user 0", 0, token, expiry, false)
	for i := 8; i < proto.TokenLen; i += 7 {
		f("MAC bit flipped", user, flip(i, 1<<(i%8)), expiry, false)
	}
	f("last MAC bit flipped", user, flip(proto.TokenLen-1, 0x80), expiry, false)
	f("expiry pushed later", user, flip(7, 1), expiry-3600, false)
	f("truncated", user, token[:proto.TokenLen-1], expiry, false)
	f("one byte extra", user, append(append([]byte(nil), token...), 0), expiry, false)
	f("empty", user, nil, expiry, false)
	f("other secret", user, proto.MintToken(nil, []byte("other"), user, expiry), expiry, false)
	f("far future", user, proto.MintToken(nil, secret, user, math.MaxInt64), expiry, true)
	f("valid still", user, token, expiry, true)
}
