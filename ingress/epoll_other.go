//go:build !linux

package ingress

import "errors"

// Elsewhere than Linux only ModeNetpoll runs; Validate rejects ModeEpoll.
const (
	epollSupported = false
	defaultMode    = ModeNetpoll
)

func newEpoll(*Ingress) (engine, error) {
	return nil, errors.New("ingress: Mode=epoll needs Linux")
}
