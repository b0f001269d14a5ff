//go:build linux

package olric

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// netDeadline runs the DEADLINE command on m (see netMemberMain): for s
// seconds, 4 goroutines check keys p0 … p(n-1) (TryConsume(1) on cfg),
// each check bounded by d milliseconds. After ms milliseconds it prints
// "DEADLINE loading" (the moment to break something), at the end
// "DEADLINE checks failed late-µs late50", late-µs the longest any check
// took beyond its deadline (negative when all answered in time) and late50
// how many took more than 50 ms beyond it.
func netDeadline(m *Member, cfg *core.Config, p string, n, s, ms, d int) {
	deadline := time.Duration(d) * time.Millisecond
	start := time.Now()
	end := start.Add(time.Duration(s) * time.Second)
	var checks, failed, late50 atomic.Int64
	var mu sync.Mutex
	worst := -deadline
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; time.Now().Before(end); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				t0 := time.Now()
				_, err := m.Execute(ctx, p+strconv.Itoa(i%n), consumeReq(cfg, 1))
				late := time.Since(t0) - deadline
				cancel()
				checks.Add(1)
				if err != nil {
					failed.Add(1)
				}
				if late > 50*time.Millisecond {
					late50.Add(1)
				}
				mu.Lock()
				worst = max(worst, late)
				mu.Unlock()
			}
		})
	}
	time.Sleep(time.Until(start.Add(time.Duration(ms) * time.Millisecond))) // the load's own schedule
	fmt.Println("DEADLINE loading")
	wg.Wait()
	fmt.Println("DEADLINE", checks.Load(), failed.Load(), worst.Microseconds(), late50.Load())
}

// TestNetCrashDeadline kills one of three members (SIGKILL, 2 replicas)
// while the two others check keys of every member, each check bounded by
// 100 ms. The dead member is a backup of some of the survivors' own
// partitions, and an owner's write to it blocks in Olric until Olric gives
// up (about 1.5 s) with the key's lock held: every check still answers by
// its deadline (a few scheduling milliseconds aside; the test allows 400
// ms), and checks go on being admitted.
func TestNetCrashDeadline(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{Replicas: 2})
	const n, seconds, preMs, deadlineMs = 60, 4, 1000, 100
	const victim = 2
	survivors := c.kids[:victim]
	for _, k := range survivors {
		k.send(t, fmt.Sprintf("DEADLINE dl %d %d %d %d", n, seconds, preMs, deadlineMs))
	}
	for _, k := range survivors {
		k.expect(t, "DEADLINE loading")
	}
	c.procs[victim].Kill()
	c.procs[victim].Wait()
	const allowed = 400 * time.Millisecond
	for i, k := range survivors {
		f := strings.Fields(k.expect(t, "DEADLINE"))
		if len(f) != 4 {
			t.Fatalf("member %d answered DEADLINE %v", i, f)
		}
		checks, _ := strconv.ParseInt(f[0], 10, 64)
		failed, _ := strconv.ParseInt(f[1], 10, 64)
		lateUs, _ := strconv.ParseInt(f[2], 10, 64)
		late50, _ := strconv.ParseInt(f[3], 10, 64)
		late := time.Duration(lateUs) * time.Microsecond
		t.Logf("member %d: %d checks, %d failed, the latest answered %v after its deadline, %d more than 50 ms after",
			i, checks, failed, late, late50)
		if late > allowed {
			t.Errorf("member %d: a check answered %v after its %d ms deadline (allowed %v)", i, late, deadlineMs, allowed)
		}
		if checks-failed < checks/2 {
			t.Errorf("member %d: %d of %d checks failed", i, failed, checks)
		}
	}
	c.stop(t)
}
