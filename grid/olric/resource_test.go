//go:build !race

// The resource tests measure heap and goroutines under thousands of
// connections; the race detector multiplies both, so they run in the
// non-race pass (see scripts/test).

package olric

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// heap returns the live heap plus goroutine stacks after a collection.
func heap() uint64 {
	runtime.GC()
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	return s.HeapAlloc + s.StackInuse
}

// TestConnectionFlood holds 2,000 idle and 500 "announce 1 MiB, send
// nothing" connections without credentials against one member of a
// secured 3-member cluster, plus 100 and 100 authenticated connections that
// announce 1 MiB or 60 KiB and send nothing, all re-opened as soon as the
// member drops them, from another process. The member keeps serving its
// peers (every check succeeds, also right after a peer reconnects), its
// connections stay within their limits, and its heap plus stacks grow by
// less than 16 MiB (measured: 4–9 MiB; unbounded before, 1 MiB per
// announced frame and 60 KiB per idle connection).
func TestConnectionFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	s := newSecrets(t)
	ms := startCluster(t, 3, func(c *Config) {
		s.secure(t)(c)
		c.ChannelIOTimeout = 2 * time.Second
	})
	target := ms[0]
	cfg := testBucket(1 << 40)
	keys := ownedKeys(target, "flood-", 50)
	// Checks that read (the owner writes nothing back): Olric's store
	// grows its tables with every write, megabytes at a time, which would
	// be counted as the attack's memory.
	load := startLoadOf(t, ms[1:], keys, availableReq(&cfg), 4)
	defer load.stop(t)      // every call must have succeeded
	time.Sleep(time.Second) // a baseline of latencies, not synchronisation
	p50, p99, n := load.take()
	t.Logf("before: %d checks, p50 %v, p99 %v", n, p50, p99)
	base := heap()
	baseG := runtime.NumGoroutine()

	certFile, keyFile, caFile := s.ca.files(t)
	startChild(t, attackerEnv, fmt.Sprintf("%s 2000 500 100 100 %s %s %s", target.ChannelAddr(), certFile, keyFile, caFile)).expect(t, "READY")
	load.take()
	var peak uint64
	var peakG, peakHS, peakEst, reconnects int
	for range 5 {
		time.Sleep(time.Second) // the attack runs; sample it
		peak = max(peak, heap())
		peakG = max(peakG, runtime.NumGoroutine())
		// A peer that reconnects must get through the flood too.
		ms[1].peers.mu.Lock()
		p := ms[1].peers.byName[target.Name()]
		ms[1].peers.mu.Unlock()
		if p != nil {
			p.fail(errors.New("test: reconnect"))
			reconnects++
		}
		target.channel.mu.Lock()
		peakHS = max(peakHS, len(target.channel.conns.handshaking))
		peakEst = max(peakEst, len(target.channel.conns.established))
		target.channel.mu.Unlock()
	}
	p50, p99, n = load.take()
	growth := int64(peak) - int64(base)
	t.Logf("during: %d checks, p50 %v, p99 %v; heap+stacks %d → %d MiB (growth %.1f MiB); goroutines %d → %d; connections handshaking ≤ %d, established ≤ %d; %d reconnections of a peer",
		n, p50, p99, base>>20, peak>>20, float64(growth)/(1<<20), baseG, peakG, peakHS, peakEst, reconnects)
	if n == 0 {
		t.Error("no check completed during the attack")
	}
	if growth > 16<<20 {
		t.Errorf("heap and stacks grew by %d MiB, bound 16", growth>>20)
	}
	if peakHS > target.channel.maxHandshaking() || peakEst > target.cfg.ChannelMaxConns {
		t.Errorf("connections beyond their limits: %d handshaking, %d established", peakHS, peakEst)
	}
	// Connections in both states and those on their way out share one
	// bound, where one goroutine per attacking connection would be 2,700.
	if limit := baseG + target.channel.maxConnGoroutines(); peakG > limit {
		t.Errorf("%d goroutines, limit %d", peakG, limit)
	}
}
