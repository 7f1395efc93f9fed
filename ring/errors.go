package ring

import (
	"errors"
	"fmt"
)

var (
	// ErrFull is returned by TryClaim when the ring has no room: the slowest
	// leaf stage has not yet finished the events that the claim would overwrite.
	ErrFull = errors.New("ring: full")
	// ErrClosed is returned by claims once Close has begun or a stage failed.
	ErrClosed = errors.New("ring: closed")
	// ErrClaimSize is returned for a claim of fewer than 1 or more than Size slots.
	ErrClaimSize = errors.New("ring: claim size out of range")
)

// StageError is the error a ring stops with when a stage's handler panics.
type StageError struct {
	Stage string // the stage's name
	Value any    // the recovered panic value
	Stack []byte // the panicking goroutine's stack
}

func (e *StageError) Error() string {
	return "ring: stage " + e.Stage + " panicked: " + fmt.Sprint(e.Value)
}
