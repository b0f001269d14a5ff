//go:build linux

package olric

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// netWatch runs the WATCH command on m (see netMemberMain): one goroutine
// per key of p0 … p(n-1) that m owns at the start checks it for s seconds,
// each attempt bounded by 100 ms. Keys m no longer owns at the end moved
// and are left out. It prints "WATCH keys worst-ms failed": how many keys
// stayed m's, the longest a run of failures of one of them lasted (from
// the start of its first failed attempt to the end of the next successful
// one's start, or to the end), and their failed attempts; the first error
// of that run goes to stderr.
func netWatch(m *Member, cfg *core.Config, p string, n, s int) {
	var keys []string
	for i := range n {
		if k := p + strconv.Itoa(i); m.Owner(k) == m.Name() {
			keys = append(keys, k)
		}
	}
	end := time.Now().Add(time.Duration(s) * time.Second)
	worst := make([]time.Duration, len(keys))
	failed := make([]int, len(keys))
	why := make([]error, len(keys)) // the first error of the longest run
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			var since time.Time
			var first error
			for time.Now().Before(end) {
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				_, err := m.Execute(ctx, k, availableReq(cfg))
				cancel()
				switch {
				case err != nil:
					failed[i]++
					if since.IsZero() {
						since, first = t0, err
					}
				case !since.IsZero():
					if t0.Sub(since) > worst[i] {
						worst[i], why[i] = t0.Sub(since), first
					}
					since = time.Time{}
				}
			}
			if !since.IsZero() && time.Since(since) > worst[i] {
				worst[i], why[i] = time.Since(since), first
			}
		})
	}
	wg.Wait()
	kept, w, f := 0, time.Duration(0), 0
	var werr error
	for i, k := range keys {
		if m.Owner(k) == m.Name() {
			kept++
			if worst[i] > w {
				w, werr = worst[i], why[i]
			}
			f += failed[i]
		}
	}
	if werr != nil {
		fmt.Fprintf(os.Stderr, "WATCH on %s: the longest run of failures (%v) began with: %v\n", m.Name(), w, werr)
	}
	fmt.Println("WATCH", kept, w.Milliseconds(), f)
}
