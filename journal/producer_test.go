package journal

import (
	"encoding/binary"
	"testing"
)

func TestAppendAllocatesNothing(t *testing.T) {
	j := open(t, t.TempDir(), func(o *Options) { o.RingBytes = 1 << 16 })
	p := j.Producer()
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	payload := make([]byte, 12)
	var pos uint64
	allocs := testing.AllocsPerRun(5000, func() {
		binary.BigEndian.PutUint64(payload, pos)
		pos = p.Append(RecTest, payload)
		p.Publish()
	})
	if allocs != 0 {
		t.Fatalf("%.2f allocations per appended record; want 0", allocs)
	}
	if err := p.Wait(pos); err != nil {
		t.Fatal(err)
	}
}
