package ring

import (
	"fmt"
	"runtime"
)

// Wait selects how a stage waits for its upstream and a producer for room.
type Wait uint8

const (
	// WaitPark spins briefly, then yields, then parks on the missing
	// sequence's signal. It is the default: idle rings cost no CPU.
	WaitPark Wait = iota
	// WaitYield spins, then calls runtime.Gosched until the sequence moves.
	// Lower wake-up latency than WaitPark; an idle stage still costs CPU.
	WaitYield
	// WaitSpin busy-spins. Only sensible when every stage has a core of its
	// own; on a loaded machine it starves other goroutines until preemption.
	WaitSpin
)

// Defaults for WaitPark: a short spin catches the next event of a busy
// stream without a park; a few yields before parking keep hundreds of
// draining rings from spinning the CPU away. A user whose stages see an
// event only every millisecond or so gains nothing from yields, and may set
// none (docs/DESIGN.md, No yields before a SET parks).
const (
	DefaultSpins  = 64
	DefaultYields = 8
)

func (w Wait) String() string {
	switch w {
	case WaitPark:
		return "park"
	case WaitYield:
		return "yield"
	case WaitSpin:
		return "spin"
	}
	return fmt.Sprintf("Wait(%d)", uint8(w))
}

// ParseWait is the inverse of Wait.String, for flags.
func ParseWait(s string) (Wait, error) {
	for _, w := range []Wait{WaitPark, WaitYield, WaitSpin} {
		if w.String() == s {
			return w, nil
		}
	}
	return 0, fmt.Errorf("unknown wait strategy %q (want park, yield or spin)", s)
}

// waiter runs the spin → yield → park progression of one wait. ready is
// checked in every round. park (WaitPark only) must block on the signal of one
// sequence that ready still lacks, until that sequence moves: the loop then
// re-checks everything, so a wait on several sequences parks on each in turn
// and never sleeps on one that has already moved.
type waiter struct {
	wait          Wait
	spins, yields int
}

func (w *waiter) until(ready func() bool, park func()) {
	for i := 0; !ready(); i++ {
		switch {
		case i < w.spins || w.wait == WaitSpin:
			// spin: re-check at once
		case i < w.spins+w.yields || w.wait == WaitYield:
			runtime.Gosched()
		default:
			park()
		}
	}
}
