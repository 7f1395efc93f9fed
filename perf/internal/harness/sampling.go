package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// Loop calls a function now and then again at the times a schedule gives,
// on a goroutine of its own, until Stop.
type Loop struct {
	stop context.CancelFunc
	done chan struct{}
}

// Repeat calls take at once and then at each next(now) until ctx is done or
// Stop is called; a take that runs late makes next skip the missed times,
// not run them in a burst.
func Repeat(ctx context.Context, next func(now time.Time) time.Time, take func()) *Loop {
	ctx, cancel := context.WithCancel(ctx)
	l := &Loop{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			take()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(next(time.Now()))):
			}
		}
	}()
	return l
}

// Stop ends the loop and waits for a take under way: after it, take is not
// called again.
func (l *Loop) Stop() {
	l.stop()
	<-l.done
}

// WriteFile creates path and writes it through a buffer with write.
func WriteFile(path string, write func(w io.Writer)) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	write(w)
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// CSVError is err as a quoted CSV field, "" for nil.
func CSVError(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf("%q", err.Error())
}
