//go:build !linux

package main

import (
	"errors"
	"time"
)

// timerSlack: without prctl a slack cannot be set.
func timerSlack(slack time.Duration) func(func() error) error {
	if slack <= 0 {
		return nil
	}
	return func(func() error) error { return errors.New("-server-timer-slack and -client-timer-slack need Linux") }
}
