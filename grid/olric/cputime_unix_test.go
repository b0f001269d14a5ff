//go:build unix

package olric

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time (user and system) the process used so far.
func cpuTime() time.Duration {
	var u syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
