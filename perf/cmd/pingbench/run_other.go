//go:build !linux

package main

import (
	"context"
	"errors"
)

func run(context.Context, config) error {
	return errors.New("pingbench needs Linux (epoll, /proc)")
}
