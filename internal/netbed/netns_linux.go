//go:build linux && (amd64 || arm64)

package netbed

import (
	"fmt"
	"runtime"
	"syscall"
)

// inNamespace runs f on an OS thread that entered the network namespace
// ns, so that the sockets f creates belong to ns (they stay there after
// the thread is gone). The thread is never handed back to other
// goroutines: it ends with the goroutine, still locked.
func inNamespace(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := syscall.Open("/run/netns/"+ns, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("netbed: namespace %s: %w", ns, err)
			return
		}
		_, _, errno := syscall.RawSyscall(sysSetns, uintptr(fd), syscall.CLONE_NEWNET, 0)
		syscall.Close(fd)
		if errno != 0 {
			errc <- fmt.Errorf("netbed: setns %s: %w", ns, errno)
			return
		}
		errc <- f()
	}()
	return <-errc
}
