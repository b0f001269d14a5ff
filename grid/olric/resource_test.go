//go:build !race

// The resource tests measure heap and goroutines under thousands of
// connections; the race detector multiplies both, so they run in the
// non-race pass (see scripts/test).

package olric

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// heap returns the live heap plus goroutine stacks after a collection.
func heap() uint64 {
	runtime.GC()
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	return s.HeapAlloc + s.StackInuse
}

// peerLoad runs checks from the other members on keys the target owns
// until stopped, recording latencies and errors.
type peerLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	lat  []time.Duration
	errs []error
}

func startPeerLoad(callers []*Member, keys []string, cfg *core.Config) *peerLoad {
	l := &peerLoad{stop: make(chan struct{})}
	for g := range 4 {
		m := callers[g%len(callers)]
		l.wg.Go(func() {
			for i := g; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				t0 := time.Now()
				_, err := m.Execute(ctx, keys[i%len(keys)], consumeReq(cfg, 1))
				d := time.Since(t0)
				cancel()
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, err)
				} else {
					l.lat = append(l.lat, d)
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

// take returns the latencies recorded so far and starts anew.
func (l *peerLoad) take() (p50, p99 time.Duration, n int, errs []error) {
	l.mu.Lock()
	lat, errs := l.lat, l.errs
	l.lat, l.errs = nil, nil
	l.mu.Unlock()
	slices.Sort(lat)
	if len(lat) == 0 {
		return 0, 0, 0, errs
	}
	return lat[len(lat)/2], lat[len(lat)*99/100], len(lat), errs
}

func (l *peerLoad) halt() {
	close(l.stop)
	l.wg.Wait()
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
	load := startPeerLoad(ms[1:], keys, &cfg)
	defer load.halt()
	time.Sleep(time.Second) // a baseline of latencies, not synchronisation
	p50, p99, n, errs := load.take()
	t.Logf("before: %d checks, p50 %v, p99 %v", n, p50, p99)
	base := heap()
	baseG := runtime.NumGoroutine()

	certFile, keyFile, caFile := s.ca.files(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s 2000 500 100 100 %s %s %s", attackerEnv, target.ChannelAddr(), certFile, keyFile, caFile))
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "READY" {
		t.Fatalf("attacker: %q %v", out.Text(), out.Err())
	}
	load.take()
	var peak uint64
	var peakG, peakHS, peakEst, reconnects int
	for range 5 {
		time.Sleep(time.Second) // the attack runs; sample it
		peak = max(peak, heap())
		peakG = max(peakG, runtime.NumGoroutine())
		// A peer that reconnects must get through the flood too.
		ms[1].peerMu.Lock()
		p := ms[1].peers[target.Name()]
		ms[1].peerMu.Unlock()
		if p != nil {
			p.fail(errors.New("test: reconnect"))
			reconnects++
		}
		target.connMu.Lock()
		peakHS = max(peakHS, len(target.conns.handshaking))
		peakEst = max(peakEst, len(target.conns.established))
		target.connMu.Unlock()
	}
	p50, p99, n, errs2 := load.take()
	errs = append(errs, errs2...)
	growth := int64(peak) - int64(base)
	t.Logf("during: %d checks, p50 %v, p99 %v; heap+stacks %d → %d MiB (growth %.1f MiB); goroutines %d → %d; connections handshaking ≤ %d, established ≤ %d; %d reconnections of a peer",
		n, p50, p99, base>>20, peak>>20, float64(growth)/(1<<20), baseG, peakG, peakHS, peakEst, reconnects)
	for _, err := range errs {
		t.Errorf("peer check: %v", err)
	}
	if n == 0 {
		t.Error("no check completed during the attack")
	}
	if growth > 16<<20 {
		t.Errorf("heap and stacks grew by %d MiB, bound 16", growth>>20)
	}
	if peakHS > target.maxHandshaking() || peakEst > target.cfg.ChannelMaxConns {
		t.Errorf("connections beyond their limits: %d handshaking, %d established", peakHS, peakEst)
	}
	// Connections in both states plus as many on their way out: bounded,
	// where one goroutine per attacking connection would be 2,700.
	if limit := baseG + 2*(target.maxHandshaking()+target.cfg.ChannelMaxConns); peakG > limit {
		t.Errorf("%d goroutines, limit %d", peakG, limit)
	}
}
