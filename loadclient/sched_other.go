//go:build !linux

package loadclient

// setSched: scheduling policies are Linux's; the load client runs only there.
func setSched(string) error { return nil }
