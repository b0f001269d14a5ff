package olric

import (
	"bytes"
	"os"
	"strconv"
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
