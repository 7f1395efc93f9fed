package journal

import (
	"bytes"
	"testing"
)

// FuzzDecode: the decoder never panics, never reads past a record's declared
// end, and whatever it accepts encodes back to the same bytes. A segment's
// walk stops at the first bad record with its offset.
func FuzzDecode(f *testing.F) {
	f.Add(AppendRecord(nil, 1, 0, nil))
	f.Add(AppendRecord(nil, 2, 7, []byte("pooled envelope 0123456789ab")))
	f.Add(AppendRecord(AppendRecord(nil, 3, 1, []byte{1, 2, 3}), 4, 2, bytes.Repeat([]byte{0xff}, 400)))
	f.Add([]byte{0, 0, 0, 3, 0, 0, 0, 0, 1, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := Decode(b)
		if err != nil {
			if n != 0 {
				t.Fatalf("error %v with %d bytes taken", err, n)
			}
		} else {
			if n > len(b) || n != Size(len(r.Payload)) {
				t.Fatalf("took %d bytes of %d for a payload of %d", n, len(b), len(r.Payload))
			}
			if again := AppendRecord(nil, r.Type, r.PID, r.Payload); !bytes.Equal(again, b[:n]) {
				t.Fatalf("decoded %+v re-encodes as %x; read from %x", r, again, b[:n])
			}
		}
		off, err := walk(b, 0, nil)
		if off > len(b) || (err == nil) != (off == len(b)) {
			t.Fatalf("walk stopped at %d of %d with %v", off, len(b), err)
		}
	})
}
