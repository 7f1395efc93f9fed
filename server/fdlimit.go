package server

import (
	"fmt"
	"syscall"
)

// FDReserve is how many descriptors of the open-files limit client
// connections may not take: the admin listener and its connections, the
// epoll descriptors, the log, and the runtime's own. Without them /stats and
// /metrics go dark exactly when the clients have filled the server.
const FDReserve = 64

// connLimit returns the most client connections the server admits: the
// open-files limit (RLIMIT_NOFILE, soft) less FDReserve, or maxConns when it
// is lower and not 0; clamped reports that maxConns asked for more. It is 0
// (no bound but maxConns) when the limit is infinite.
func connLimit(maxConns int) (limit int, clamped bool, err error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, false, fmt.Errorf("reading the open-files limit: %w", err)
	}
	if rl.Cur > 1<<40 { // RLIM_INFINITY, or as good as
		return maxConns, false, nil
	}
	room := int(rl.Cur) - FDReserve
	if room < 1 {
		return 0, false, fmt.Errorf("the open-files limit (ulimit -n) is %d: it leaves no descriptor for clients beyond the %d kept for the admin API and the server; raise it", rl.Cur, FDReserve)
	}
	if maxConns == 0 || maxConns > room {
		return room, maxConns > room, nil
	}
	return maxConns, false, nil
}
