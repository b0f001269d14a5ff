package olric

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// ioCalls returns how many read and write system calls (read, recvmsg,
// write, sendmsg, ...) the process made so far, from /proc/self/io; -1, -1
// when it cannot be read.
func ioCalls() (reads, writes int64) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1, -1
	}
	reads, writes = -1, -1
	for line := range bytes.Lines(b) {
		name, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte(": "))
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			continue
		}
		switch string(name) {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}

// runqueueWait returns how long the process's threads have waited, runnable,
// for a CPU so far (the second field of each thread's
// /proc/self/task/*/schedstat; threads that ended are not counted); -1 when
// it cannot be read. On a machine other work keeps busy this is where
// latency goes: a check that wakes a thread waits for it.
func runqueueWait() time.Duration {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return -1
	}
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread ended
		}
		f := bytes.Fields(b)
		if len(f) < 2 {
			return -1
		}
		n, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			return -1
		}
		total += n
	}
	return time.Duration(total)
}
