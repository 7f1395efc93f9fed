//go:build !linux

package main

import (
	"errors"
	"time"
)

type cpuSnapshot struct{ at time.Time }

func snapshot() (cpuSnapshot, error) {
	return cpuSnapshot{at: time.Now()}, errors.New("machine load is only read on Linux")
}

func othersLoad(a, b cpuSnapshot, cpus int) string { return "load of other processes unknown" }
