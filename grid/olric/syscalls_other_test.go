//go:build !linux

package olric

import "time"

// ioCalls is not measured on this system.
func ioCalls() (reads, writes int64) { return -1, -1 }

// runqueueWait is not measured on this system.
func runqueueWait() time.Duration { return -1 }
