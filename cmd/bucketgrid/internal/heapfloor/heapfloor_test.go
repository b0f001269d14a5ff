package heapfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

const mib = 1 << 20

// sink keeps each garbage allocation from being optimized away.
var sink []byte

// allocate makes n MiB of garbage, 64 KiB at a time, as a service's checks
// do in many small pieces.
func allocate(n int) {
	for i := range n * 16 {
		sink = make([]byte, 64<<10)
		if i%16 == 0 {
			runtime.Gosched() // lets a starved mark worker run
		}
	}
	sink = nil
}

func readUint(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func cycles() uint64 { return readUint("/gc/cycles/total:gc-cycles") }

func heapGoal() uint64 { return readUint("/gc/heap/goal:bytes") }

func gcPercent() int { return int(readUint("/gc/gogc:percent")) }

// operator sets GOGC and GOMEMLIMIT as the environment would (the runtime
// reads both into the state these functions set) for the test, and puts
// them back after it.
func operator(t *testing.T, percent int, limit int64) {
	t.Helper()
	oldPercent := debug.SetGCPercent(percent)
	oldLimit := debug.SetMemoryLimit(limit)
	t.Cleanup(func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
		runtime.GC()
	})
}

// collectionsOver counts the collections that allocating n MiB of garbage
// takes, from a fresh cycle.
func collectionsOver(n int) uint64 {
	runtime.GC()
	c0 := cycles()
	allocate(n)
	return cycles() - c0
}

// TestFloorSpacesCollections: with a small live heap (about 2 MiB),
// allocating N MiB collects about every 2× live without the floor, and about
// every floor with it: at most N/(floor − live) + 2 collections (one more
// for a cycle whose percent was set from a live heap that counted garbage
// made while it marked). On a loaded machine marking runs behind the
// allocation and a cycle counts more of it live, so a comparison that fails
// is tried again, up to three times.
func TestFloorSpacesCollections(t *testing.T) {
	operator(t, 100, math.MaxInt64)
	keep := make([]byte, 2*mib)
	const n, floor = 256, 64
	most, least := uint64(n/(floor-8)+2), uint64(n/32)
	runtime.GC()
	stop := Start(floor * mib)
	goal := heapGoal()
	stop()
	if goal < floor*mib || goal > floor*mib*11/10 {
		t.Errorf("heap goal %d MiB with a floor of %d MiB and a small live heap: want the floor", goal/mib, floor)
	}
	for attempt := 1; ; attempt++ {
		without := collectionsOver(n)
		stop := Start(floor * mib)
		with := collectionsOver(n)
		stop()
		t.Logf("%d MiB of garbage: %d collections without a floor, %d with %d MiB", n, without, with, floor)
		// without is the control: the same garbage collects every few MiB
		// (Go's 4 MiB minimum, or 2× live), or the test shows nothing
		if with <= most && without >= least {
			break
		}
		if attempt == 3 {
			t.Fatalf("%d collections with a floor of %d MiB (want at most %d), %d without (want at least %d)", with, floor, most, without, least)
		}
	}
	runtime.KeepAlive(keep)
}

// TestFloorIsNoLeak: once the live heap outgrows the floor, the heap
// collects at GOGC's proportion again (2× live at GOGC=100), not at the
// proportion that held a small heap up to the floor.
func TestFloorIsNoLeak(t *testing.T) {
	operator(t, 100, math.MaxInt64)
	const floor, live, n = 32, 24, 256
	runtime.GC()
	stop := Start(floor * mib)
	defer stop()
	if g := heapGoal(); g < floor*mib {
		t.Fatalf("heap goal %d MiB with a small live heap: want the floor, %d MiB", g/mib, floor)
	}
	keep := make([]byte, live*mib) // now live is above floor/2: 2× live is the goal
	least := uint64(n / (live * 5 / 2))
	got := collectionsOver(n)
	for attempt := 2; got < least && attempt <= 3; attempt++ {
		// a cycle whose marking a loaded machine kept from finishing
		// spans more of the garbage: try again
		t.Logf("attempt %d: %d collections over %d MiB", attempt-1, got, n)
		got = collectionsOver(n)
	}
	// a cycle's live heap counts what was allocated while it marked: a
	// cycle with no garbage being made shows the goal for live alone
	runtime.GC()
	waitPercent(t, func(p int) bool { return p == 100 }, "GOGC's 100 with 24 MiB live")
	goal := heapGoal()
	runtime.KeepAlive(keep)
	t.Logf("live %d MiB, floor %d MiB: %d collections over %d MiB of garbage, goal %d MiB, GOGC %d", live, floor, got, n, goal/mib, gcPercent())
	if got < least {
		t.Errorf("%d collections over %d MiB with %d MiB live: want at least %d (GOGC=100 collects every ~%d MiB)", got, n, live, least, live)
	}
	if most := uint64(2*live*mib*11/10 + 2*mib); goal > most {
		t.Errorf("heap goal %d MiB with %d MiB live: want about 2× live, at most %d MiB", goal/mib, live, most/mib)
	}
}

// TestOperatorGOGC: GOGC=off keeps its meaning (no proportional
// collections: the tuner leaves it alone), and GOGC=50 is the proportion
// above the floor.
func TestOperatorGOGC(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		operator(t, -1, math.MaxInt64)
		stop := Start(64 * mib)
		runtime.GC()
		runtime.GC()
		p := gcPercent()
		stop()
		if p != -1 {
			t.Errorf("GOGC off, floor 64 MiB: GOGC %d, want off (-1)", p)
		}
		if p := gcPercent(); p != -1 {
			t.Errorf("after stop: GOGC %d, want off (-1)", p)
		}
	})
	t.Run("50", func(t *testing.T) {
		operator(t, 50, math.MaxInt64)
		keep := make([]byte, 24*mib)
		runtime.GC()
		stop := Start(8 * mib) // 1.5 × 24 MiB is above the floor
		goal := heapGoal()
		p := gcPercent()
		stop()
		runtime.KeepAlive(keep)
		if p != 50 || goal > 24*mib*3/2*11/10+2*mib {
			t.Errorf("GOGC=50, 24 MiB live, floor 8 MiB: GOGC %d, goal %d MiB; want 50 and about 36 MiB", p, goal/mib)
		}
		if p := gcPercent(); p != 50 {
			t.Errorf("after stop: GOGC %d, want the operator's 50 back", p)
		}
	})
	t.Run("50 below the floor", func(t *testing.T) {
		operator(t, 50, math.MaxInt64)
		runtime.GC()
		stop := Start(64 * mib)
		goal := heapGoal()
		stop()
		if goal < 64*mib || goal > 64*mib*11/10 {
			t.Errorf("GOGC=50, small live heap, floor 64 MiB: goal %d MiB, want the floor", goal/mib)
		}
	})
}

// TestMemoryLimitWins: a GOMEMLIMIT below the floor bounds the heap: the
// floor never holds more than the operator's limit allows.
func TestMemoryLimitWins(t *testing.T) {
	const limit, floor, n = 48, 128, 256
	operator(t, 100, limit*mib)
	stop := Start(floor * mib)
	defer stop()
	got := collectionsOver(n)
	goal := heapGoal()
	// Not a count of collections: near the limit the runtime's GC CPU
	// limiter lets one cycle span the whole garbage on a loaded machine
	// (0 to 4 collections counted beside 8 busy loops); the goal is what
	// the floor would raise, and the limit caps it.
	t.Logf("GOMEMLIMIT %d MiB, floor %d MiB: %d collections over %d MiB, goal %d MiB", limit, floor, got, n, goal/mib)
	if goal > limit*mib {
		t.Errorf("heap goal %d MiB above GOMEMLIMIT %d MiB", goal/mib, limit)
	}
}

// TestTunerFollowsEveryCycle: the percent is set anew after collections
// the tuner did not start, as the live heap changes: it falls to GOGC's
// once live × 2 is above the floor, and rises again when the heap shrinks.
func TestTunerFollowsEveryCycle(t *testing.T) {
	operator(t, 100, math.MaxInt64)
	const floor = 64
	runtime.GC()
	stop := Start(floor * mib)
	defer stop()
	high := gcPercent()
	if high <= 100 {
		t.Fatalf("small live heap, floor %d MiB: GOGC %d, want above 100", floor, high)
	}
	keep := make([]byte, 48*mib)
	waitPercent(t, func(p int) bool { return p == 100 }, "100 with 48 MiB live")
	runtime.KeepAlive(keep)
	keep = nil
	waitPercent(t, func(p int) bool { return p > 100 }, "above 100 once the 48 MiB are garbage")
}

// waitPercent collects until the tuner has set a percent ok accepts; it
// runs after a cycle, on the finalizer goroutine.
func waitPercent(t *testing.T, ok func(int) bool, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok(gcPercent()) {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC %d, want %s", gcPercent(), want)
		}
		runtime.GC()
		runtime.Gosched()
	}
}

// TestPercentFor: the percent that makes the runtime's goal
// max(floor, live + (live+stacks+globals)×GOGC/100), with Go's minimum
// heap of 4 MiB × GOGC/100.
func TestPercentFor(t *testing.T) {
	for _, tc := range []struct {
		base              int
		floor, live, scan uint64
		want              int
	}{
		{100, 64 * mib, 0, 0, 1600},                     // before any cycle: the minimum heap is the floor
		{100, 64 * mib, 2 * mib, 3 * mib, 1600},         // the minimum heap reaches the floor first
		{100, 64 * mib, 30 * mib, 34 * mib, 100},        // 30 + 34 = 64: GOGC's own goal is the floor
		{100, 64 * mib, 20 * mib, 22 * mib, 200},        // 20 + 22 × 2 = 64
		{100, 64 * mib, 40 * mib, 41 * mib, 100},        // above the floor
		{50, 64 * mib, 50 * mib, 50 * mib, 50},          // 75 MiB at GOGC=50
		{-1, 64 * mib, 2 * mib, 3 * mib, -1},            // off stays off
		{100, 0, 2 * mib, 3 * mib, 100},                 // no floor
		{100, 1 << 50, 2 * mib, 3 * mib, math.MaxInt32}, // capped
	} {
		if got := percentFor(tc.base, tc.floor, tc.live, tc.scan); got != tc.want {
			t.Errorf("percentFor(%d, %d, %d, %d) = %d, want %d", tc.base, tc.floor, tc.live, tc.scan, got, tc.want)
		}
	}
}
