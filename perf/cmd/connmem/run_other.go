//go:build !linux

package main

import (
	"context"
	"errors"
)

func run(context.Context, config) error {
	return errors.New("connmem needs Linux (/proc, raw sockets with IP_BIND_ADDRESS_NO_PORT)")
}
