//go:build linux

package olric

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
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
// of that run goes to stderr, and with NETWATCH_TRACE set in the test's
// environment every failed attempt of that run too (its routing read's
// age, the partition's guard, split, owners, error, Olric's coordinator).
// A key is checked again pace after a success: checks run flat out starve
// the member's own refresher and gossip on a loaded machine.
func netWatch(m *Member, cfg *core.Config, p string, n, s int, pace time.Duration) {
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
	traces := make([][]string, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			var since time.Time
			var first error
			var tr []string
			for time.Now().Before(end) {
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				_, err := m.Execute(ctx, k, availableReq(cfg))
				cancel()
				switch {
				case err != nil:
					failed[i]++
					if since.IsZero() {
						since, first, tr = t0, err, nil
					}
					r := m.routes.Load()
					p := m.Partition(k)
					if len(tr) < 60 {
						tr = append(tr, fmt.Sprintf("%d +%dms age=%dms guard=%dms split=%v members=%d hist=%s backups=%s err=%v", t0.UnixMilli(), time.Since(t0).Milliseconds(), (m.mono()-r.start)/1e6, (r.guardUntil[p]-m.mono())/1e6, r.split, r.members, r.history[p], r.backups[p], err)+" coord="+coordinator(m))
					}
				case !since.IsZero():
					if t0.Sub(since) > worst[i] {
						worst[i], why[i], traces[i] = t0.Sub(since), first, tr
					}
					since = time.Time{}
				}
				if err == nil {
					time.Sleep(pace) // a client's pace: flat out, the checks starve the member
				}
			}
			if !since.IsZero() && time.Since(since) > worst[i] {
				worst[i], why[i], traces[i] = time.Since(since), first, tr
			}
		})
	}
	wg.Wait()
	kept, w, f := 0, time.Duration(0), 0
	var werr error
	var wtr []string
	for i, k := range keys {
		if m.Owner(k) == m.Name() {
			kept++
			if worst[i] > w {
				w, werr, wtr = worst[i], why[i], traces[i]
			}
			f += failed[i]
		}
	}
	if werr != nil {
		fmt.Fprintf(os.Stderr, "WATCH on %s: the longest run of failures (%v) began with: %v\n", m.Name(), w, werr)
		if os.Getenv("NETWATCH_TRACE") != "" {
			fmt.Fprintf(os.Stderr, "WATCH trace on %s:\n\t%s\n", m.Name(), strings.Join(wtr, "\n\t"))
		}
	}
	fmt.Println("WATCH", kept, w.Milliseconds(), f)
}

func coordinator(m *Member) string {
	ms, _ := m.client.Members(context.Background())
	for _, x := range ms {
		if x.Coordinator {
			return x.Name
		}
	}
	return "-"
}
