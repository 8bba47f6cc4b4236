package testkit

import (
	"syscall"
	"time"
)

// CPUTime is the test process's CPU time so far, user and system: the
// cost of a benchmark's work on a machine other processes load, where its
// wall time is not.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
