// Package heapfloor keeps a process's heap from being collected below a
// minimum size, the floor, while keeping GOGC's proportional rule above it.
//
// With GOGC=100 the runtime collects when the heap reaches twice what the
// last collection left live (at least 4 MiB). A service whose live heap is a
// few MiB and which allocates a few objects per request then collects every
// few MiB, hundreds of times a second under load, and every collection also
// shrinks the stacks of parked goroutines, which the next request grows
// back. With a floor the heap collects when it reaches
//
//	max(floor, live + (live + stacks + globals) × GOGC/100)
//
// so a small live heap collects every floor − live bytes of allocation,
// and a live heap above the floor's reach collects exactly as GOGC says.
//
// The rule with the operator's own settings:
//   - GOGC=off (or debug.SetGCPercent(-1) before Start): the floor does
//     nothing; GOGC off keeps its meaning, no proportional collections at all.
//   - GOGC=N: N is the proportion above the floor, as 100 is by default.
//   - GOMEMLIMIT: the runtime collects as the process's Go memory nears the
//     limit whatever GOGC says, so the limit bounds the floor too: a floor
//     above the limit holds the heap at the limit, never beyond it.
//
// The floor is kept by setting GOGC (debug.SetGCPercent) after every
// collection, from the live heap it left (runtime/metrics), so
// /gc/gogc:percent (go_gc_gogc_percent in Prometheus) shows the percent in
// force, not the operator's. The percent is reset on a finalizer the
// collector runs after each cycle, so a cycle's goal comes from the percent
// set after the cycle before it: when the live heap jumps across the floor
// (from well below it to well above, or back), one cycle runs at the
// percent of the heap before the jump.
package heapfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// MinHeap is the runtime's minimum heap goal at GOGC=100, in bytes: a floor
// at or below it changes nothing. At GOGC=N the minimum is MinHeap × N/100
// (the runtime's defaultHeapMinimum).
const MinHeap = 4 << 20

// the runtime/metrics the goal is computed from: what the last cycle
// marked live, and the stacks and globals it scanned (GOGC's proportion
// applies to their sum since Go 1.18)
var names = []string{
	"/gc/heap/live:bytes",
	"/gc/scan/stack:bytes",
	"/gc/scan/globals:bytes",
	"/gc/gogc:percent",
}

// tuner holds the floor and the operator's GOGC; mu serializes the
// finalizer's update with stop.
type tuner struct {
	floor   uint64
	base    int // the operator's GOGC percent; -1 is off
	mu      sync.Mutex
	stopped bool
	samples []metrics.Sample
}

// sentinel is the object whose finalizer runs after each collection; its
// pointer keeps it out of the tiny allocator, whose objects may never be
// finalized.
type sentinel struct{ t *tuner }

// Start keeps the heap goal at max(floor, GOGC's goal) until stop is
// called, which puts the operator's GOGC back. The operator's GOGC is the
// percent in force when Start is called (the GOGC environment variable's,
// unless the program changed it); if it is off, or floor is 0, Start does
// nothing. One tuner at a time: the percent is process-wide.
func Start(floor uint64) (stop func()) {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if floor == 0 || base < 0 {
		return func() {}
	}
	t := &tuner{floor: floor, base: base, samples: make([]metrics.Sample, len(names))}
	for i, n := range names {
		t.samples[i].Name = n
	}
	t.update()
	runtime.SetFinalizer(&sentinel{t}, (*sentinel).collected)
	return t.stop
}

// collected runs on the finalizer goroutine after a collection found s
// unreachable: it sets the percent for the next cycle and re-arms.
func (s *sentinel) collected() {
	if s.t.update() {
		runtime.SetFinalizer(s, (*sentinel).collected)
	}
}

// update sets the percent from the last cycle's live heap, and reports
// whether the tuner still runs.
func (t *tuner) update() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.samples)
	live, stacks, globals := t.samples[0].Value.Uint64(), t.samples[1].Value.Uint64(), t.samples[2].Value.Uint64()
	if p := percentFor(t.base, t.floor, live, live+stacks+globals); p != int(t.samples[3].Value.Uint64()) {
		debug.SetGCPercent(p)
	}
	return true
}

func (t *tuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		debug.SetGCPercent(t.base)
	}
}

// percentFor returns the GOGC percent whose heap goal is
// max(floor, live + scan × base/100), where scan is live plus the stacks
// and globals the last cycle scanned: the runtime's goal at percent p is
// max(MinHeap × p/100, live + scan × p/100), so the least p that reaches the
// floor is the lesser of the p that lifts either term to it. base -1 (off)
// stays off; the result is at most math.MaxInt32.
func percentFor(base int, floor, live, scan uint64) int {
	if base < 0 || floor == 0 {
		return base
	}
	need := ceilDiv(floor*100, MinHeap) // the minimum heap reaches the floor
	if floor <= live {
		need = 0
	} else if scan > 0 {
		need = min(need, ceilDiv((floor-live)*100, scan))
	}
	return int(min(max(need, uint64(base)), math.MaxInt32))
}

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }
