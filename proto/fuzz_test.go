package proto_test

import (
	"bytes"
	"testing"

	"github.com/hongbao-io/hongbao/proto"
)

// The seed corpora in testdata/fuzz hold one stream of every type, each type alone, streams
// split mid-frame and a few violations, each with a cut point.

func FuzzNextRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, cut uint) { fuzzNext(t, proto.NextRequest, data, cut) })
}

func FuzzNextResponse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, cut uint) { fuzzNext(t, proto.NextResponse, data, cut) })
}

// fuzzNext checks that next never panics or overreaches on data, that what it accepts
// re-encodes to the same bytes, and that data cut in two at cut decodes like data whole.
func fuzzNext(t *testing.T, next nextFunc, data []byte, cut uint) {
	for off := 0; ; {
		buf := data[off:]
		f, n, err := next(buf)
		if err != nil {
			if _, ok := err.(*proto.Violation); !ok || n != 0 {
				t.Fatalf("at %d: got n=%d err=%v (%T); want n=0 and a *Violation", off, n, err, err)
			}
			break
		}
		if n == 0 {
			if len(buf) >= proto.MaxFrameLen {
				t.Fatalf("at %d: asked for more with %d bytes, more than the largest frame", off, len(buf))
			}
			break
		}
		if n < proto.HeaderLen || n > len(buf) {
			t.Fatalf("at %d: got n=%d with %d bytes; want %d ≤ n ≤ %d", off, n, len(buf), proto.HeaderLen, len(buf))
		}
		if h := header(n, f.Type, f.Flags, f.Stamp); !bytes.Equal(h, buf[:proto.HeaderLen]) {
			t.Fatalf("at %d: header re-encodes to %x; want %x", off, h, buf[:proto.HeaderLen])
		}
		if len(f.Body) != n-proto.HeaderLen || cap(f.Body) != len(f.Body) {
			t.Fatalf("at %d: got body of len %d cap %d; want both %d", off, len(f.Body), cap(f.Body), n-proto.HeaderLen)
		}
		re := reencode(f)
		if len(re) > n || !bytes.Equal(re[proto.HeaderLen:], buf[proto.HeaderLen:len(re)]) ||
			re[2] != buf[2] || !bytes.Equal(re[4:proto.HeaderLen], buf[4:proto.HeaderLen]) {
			t.Fatalf("at %d: %s re-encodes to %x; want a prefix of %x with flags 0", off, show(f), re, buf[:n])
		}
		off += n
	}

	whole := decodeChunks(next, data)
	k := int(cut % uint(len(data)+1))
	if d := decodeChunks(next, data[:k], data[k:]).diff(whole); d != "" {
		t.Fatalf("split at %d: %s", k, d)
	}
}
