package journal

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// File is what the writer needs of a segment file; Options.Create may return
// one that fails on purpose.
type File interface {
	Write(p []byte) (int, error)
	Sync() error // data durable on disk (fdatasync)
	Close() error
}

// osFile is a segment on disk: its Sync is fdatasync, since the rounds need
// their data durable and not the file's times.
type osFile struct{ *os.File }

func (f osFile) Sync() error { return unix.Fdatasync(int(f.Fd())) }

// createFile is Options.Create's default: a new segment, never one reused.
func createFile(path string) (File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// WriteFile writes a file under a temporary name, syncs it, renames it
// into place and syncs the directory: a crash leaves the old file or the
// whole new one. Snapshots are written so.
func WriteFile(dir, name string, b []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir makes a directory's entries (files created, renamed, removed)
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("journal: syncing directory %s: %w", dir, err)
	}
	return nil
}

// syncFile makes a file's data durable, whoever wrote it.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	if err := (osFile{f}).Sync(); err != nil {
		return fmt.Errorf("journal: syncing %s: %w", path, err)
	}
	return nil
}

// truncate cuts a file to size, synced.
func truncate(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}
