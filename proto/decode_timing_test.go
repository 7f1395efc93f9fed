package proto_test

import (
	"testing"

	"github.com/hongbao-io/hongbao/proto"
)

// BenchmarkNextRequest decodes a stream of one of every request, reading every field.
func BenchmarkNextRequest(b *testing.B) {
	stream := requestStream()
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	var sink uint64
	for b.Loop() {
		for buf := stream; len(buf) > 0; {
			f, n, err := proto.NextRequest(buf)
			if err != nil || n == 0 {
				b.Fatal("stream does not decode")
			}
			sink += readAll(f)
			buf = buf[n:]
		}
	}
	_ = sink
}
