//go:build !linux

package main

import (
	"errors"
	"time"
)

func withTimerSlack(slack time.Duration, start func() error) error {
	if slack > 0 {
		return errors.New("-server-timer-slack and -client-timer-slack need Linux")
	}
	return start()
}
