package event_test

import (
	"testing"
	"unsafe"

	"github.com/hongbao-io/hongbao/event"
)

// TestEventSize pins the size of a ring slot: every SET's ring holds -ring of
// them, preallocated, and the defaults' memory figures are quoted from it.
func TestEventSize(t *testing.T) {
	if got := unsafe.Sizeof(event.Event{}); got != 128 {
		t.Errorf("Event is %d bytes; want 128 (update the memory figures in server/options.go if this changes)", got)
	}
}
