package harness

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

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
