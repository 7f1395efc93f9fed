//go:build !linux

package loadclient

import (
	"errors"
	"runtime"
)

// newEngine needs epoll: on other systems the load client does not run.
func newEngine(*runPlan) (engine, error) {
	return nil, errors.New("loadclient needs Linux (epoll, IP_BIND_ADDRESS_NO_PORT); this is " + runtime.GOOS)
}
