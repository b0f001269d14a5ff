// Package child runs a program a test starts in a process of its own: what
// it writes is collected for the test's failure messages, its end is
// observed, and it is killed when the test ends if it still runs.
package child

import (
	"bytes"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Output collects what a process writes; it is safe for the process's
// writes and the test's reads at once.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

// String returns everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// Process is a started command.
type Process struct {
	// Cmd is the command, started.
	Cmd *exec.Cmd
	// Out holds what the process wrote to the standard error, and to the
	// standard output unless the command had one of its own.
	Out *Output

	exited chan struct{}
	err    error // of Cmd.Wait, once exited is closed
}

// Start starts cmd, sending its standard error, and its standard output
// unless cmd already has one (a pipe the caller reads, say), to the
// Process's Out, and kills it when t ends if it still runs. A command that
// cannot start fails t. Unless cmd sets WaitDelay, the output of children
// that outlive the process is read for at most 5 s after it ended.
func Start(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{Cmd: cmd, Out: &Output{}, exited: make(chan struct{})}
	if cmd.Stderr == nil {
		cmd.Stderr = p.Out
	}
	if cmd.Stdout == nil {
		cmd.Stdout = p.Out
	}
	if cmd.WaitDelay == 0 {
		// A process's own children may keep its output open after it
		// ended; its end must not wait for theirs.
		cmd.WaitDelay = 5 * time.Second
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.Kill)
	return p
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Exited is closed once the process has ended and its output is in.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err returns how the process ended (Cmd.Wait's error; nil for exit status
// 0). Call it once Exited is closed.
func (p *Process) Err() error {
	<-p.exited
	return p.err
}

// Kill ends the process at once (SIGKILL), as a crash would, and waits for
// it; a process that has ended is left alone.
func (p *Process) Kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.Cmd.Process.Kill()
	<-p.exited
}

// Stop asks the process to end (SIGTERM) and waits up to grace for it;
// one still running then is killed, and Stop reports false.
func (p *Process) Stop(grace time.Duration) bool {
	return p.Signal(syscall.SIGTERM, grace)
}

// Signal sends sig and waits up to grace for the process to end; one still
// running then is killed, and Signal reports false. A process that has
// ended already reports true.
func (p *Process) Signal(sig syscall.Signal, grace time.Duration) bool {
	select {
	case <-p.exited:
		return true
	default:
	}
	p.Cmd.Process.Signal(sig)
	select {
	case <-p.exited:
		return true
	case <-time.After(grace):
		p.Kill()
		return false
	}
}
