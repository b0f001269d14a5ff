package olric

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// TestDrainWaitsForExecutions checks ownerExec.drain, Shutdown's first
// step, on its own: it returns only after the execution in flight (a
// read hold of the gate) has left, and then hold refuses new executions
// with frame.KindHold, so that callers go to the next owner. A drain whose
// context ended returns without waiting, executions stopped all the same.
func TestDrainWaitsForExecutions(t *testing.T) {
	m := &Member{}
	m.exec.m, m.exec.stripes = m, make([]stripe, 1)
	m.exec.gate.RLock() // an execution in flight
	var left atomic.Bool
	drained := make(chan struct{})
	go func() {
		m.exec.drain(context.Background())
		if !left.Load() {
			t.Error("drain returned while an execution was in flight")
		}
		close(drained)
	}()
	mustWait(t, "drain to start", m.exec.leaving.Load)
	left.Store(true)
	m.exec.gate.RUnlock()
	select {
	case <-drained:
	case <-time.After(time.Minute):
		t.Fatal("drain still waiting a minute after the execution left")
	}
	if _, o, ok := m.exec.hold(context.Background(), 0, bound{}); ok || o.kind != frame.KindHold {
		t.Errorf("hold after drain: ok %v, kind %d; want frame.KindHold", ok, o.kind)
	}

	stuck := &Member{}
	stuck.exec.m = stuck
	stuck.exec.gate.RLock() // never leaves
	defer stuck.exec.gate.RUnlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stuck.exec.drain(ctx) // returns: its context ended
	if !stuck.exec.leaving.Load() {
		t.Error("a drain that gave up did not stop executions")
	}
}
