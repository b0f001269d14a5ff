//go:build linux

package olric

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// The buckets of the degrade test: degradeCapacity tokens, degradeRate
// more a second.
const (
	degradeCapacity = 100
	degradeRate     = 50
)

// degradeTally is what one member counted for one key in a DEGRADE load.
type degradeTally struct {
	// through a Manager with WithDegrade: admitted and refused in all, of
	// which decided from the local share; failed (an error the caller
	// sees).
	admitted, refused, localAdmitted, localRefused, failed int64
	// straight to the executor: admitted, refused, failed, and the
	// milliseconds the failed checks waited.
	plainAdmitted, plainRefused, plainFailed, plainFailedMs int64
}

// degradeFields is the number of fields of a degradeTally on the wire.
const degradeFields = 9

// netDegrade runs the DEGRADE command on m (see netMemberMain): for s
// seconds, 4 goroutines check keys p+"d"+i through a Manager over m with
// degrade on (its defaults: the grid's live members, 100 ms, 3 failures),
// and 2 goroutines check keys p+"o"+i straight on m, as a front door
// without degrade does; every check is TryConsume(1), bounded by 250 ms
// (httplimit's default) without degrade and by 1 s with it (its own
// timeout decides far earlier: the room is for a starved machine, so that
// a failure there is degrade's). A failure is printed on stderr. After ms milliseconds it prints "DEGRADE loading"
// (the moment to break something), at the end "DEGRADE first-ns last-ns
// charged charge-failed" and the n tallies' fields.
func netDegrade(m *Member, p string, n, s, ms int) {
	cfg, _ := core.NewConfig(core.Greedy(degradeCapacity, degradeRate, time.Second))
	configFn := func(context.Context) (core.Config, error) { return cfg, nil }
	mgr := bucketgrid.NewManager(m, bucketgrid.WithDegrade(bucketgrid.Degrade{}))
	tally := make([]degradeTally, n)
	var mu sync.Mutex // guards tally
	start := time.Now()
	end := start.Add(time.Duration(s) * time.Second)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; time.Now().Before(end); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				t0 := time.Now()
				res, share, err := mgr.Bucket(p+"d"+strconv.Itoa(i%n), configFn).Execute(ctx,
					wire.Op{Kind: wire.OpTryConsume, Tokens: 1})
				ok := err == nil && res[0].OK
				took := time.Since(t0)
				cancel()
				mu.Lock()
				t := &tally[i%n]
				switch {
				case err != nil:
					if t.failed == 0 {
						fmt.Fprintf(os.Stderr, "DEGRADE: %sd%d failed after %v: %v\n", p, i%n, took, err)
					}
					t.failed++
				case ok:
					t.admitted++
					if share > 0 {
						t.localAdmitted++
					}
				default:
					t.refused++
					if share > 0 {
						t.localRefused++
					}
				}
				mu.Unlock()
			}
		})
	}
	for g := range 2 {
		wg.Go(func() {
			for i := g; time.Now().Before(end); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
				t0 := time.Now()
				resp, err := m.Execute(ctx, p+"o"+strconv.Itoa(i%n), consumeReq(&cfg, 1))
				took := time.Since(t0)
				cancel()
				mu.Lock()
				t := &tally[i%n]
				switch {
				case err != nil:
					t.plainFailed++
					t.plainFailedMs += took.Milliseconds()
				case resp.Results[0].OK:
					t.plainAdmitted++
				default:
					t.plainRefused++
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(time.Until(start.Add(time.Duration(ms) * time.Millisecond))) // the load's own schedule
	fmt.Println("DEGRADE loading")
	wg.Wait()
	last := time.Now()
	st := mgr.Stats()
	out := []string{"DEGRADE", strconv.FormatInt(start.UnixNano(), 10), strconv.FormatInt(last.UnixNano(), 10),
		strconv.FormatInt(st.Charged, 10), strconv.FormatInt(st.ChargeFailed, 10)}
	for _, t := range tally {
		for _, v := range []int64{t.admitted, t.refused, t.localAdmitted, t.localRefused, t.failed,
			t.plainAdmitted, t.plainRefused, t.plainFailed, t.plainFailedMs} {
			out = append(out, strconv.FormatInt(v, 10))
		}
	}
	fmt.Println(strings.Join(out, " "))
}

// owned asks k which of the keys p0 … p(n-1) it owns.
func owned(t *testing.T, k *child, p string, n int) map[int]bool {
	t.Helper()
	k.send(t, fmt.Sprintf("OWNED %s %d", p, n))
	out := map[int]bool{}
	for _, s := range strings.Fields(k.expect(t, "OWNED")) {
		i, _ := strconv.Atoi(s)
		out[i] = true
	}
	return out
}

// degradeResult is one member's DEGRADE report.
type degradeResult struct {
	first, last           time.Time
	charged, chargeFailed int64
	keys                  []degradeTally
}

func degradeReport(t *testing.T, k *child, n int) degradeResult {
	t.Helper()
	f := strings.Fields(k.expect(t, "DEGRADE"))
	if len(f) != 4+n*degradeFields {
		t.Fatalf("DEGRADE answered %d fields, want %d", len(f), 4+n*degradeFields)
	}
	v := make([]int64, len(f))
	for i, s := range f {
		v[i], _ = strconv.ParseInt(s, 10, 64)
	}
	r := degradeResult{first: time.Unix(0, v[0]), last: time.Unix(0, v[1]), charged: v[2], chargeFailed: v[3]}
	for i := range n {
		x := v[4+i*degradeFields:]
		r.keys = append(r.keys, degradeTally{x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8]})
	}
	return r
}

// TestNetCrashDegrades kills one of three members (SIGKILL, 2 replicas)
// under load from the two others, who check keys through a Manager with
// degrade on and, beside them, other keys straight on the grid as a front
// door without degrade does. For the keys the dead member owned:
//   - without degrade, checks fail (a middleware fails them open or
//     closed); with degrade, none fails: they are decided locally;
//   - with degrade, no key admits more than one capacity above its limit
//     over the load (capacity + rate × duration), charge-back included;
//   - a survivor that refused a key locally had admitted at least its
//     share of it: a third of the tokens it last saw (the grid counts 3
//     members until gossip declares the dead one gone), which is at least
//     a third of the capacity less what both survivors admitted through
//     the grid (refill only adds), and at most ⌈capacity/3⌉: no client
//     refused beyond its share.
func TestNetCrashDegrades(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{Replicas: 2})
	const n, seconds, preMs = 30, 5, 1000
	const victim = 2
	deadD, deadO := owned(t, c.kids[victim], "dgd", n), owned(t, c.kids[victim], "dgo", n)
	if len(deadD) == 0 || len(deadO) == 0 {
		t.Fatalf("the member to kill owns %d and %d of the %d keys of each set", len(deadD), len(deadO), n)
	}
	survivors := c.kids[:victim]
	for _, k := range survivors {
		k.send(t, fmt.Sprintf("DEGRADE dg %d %d %d", n, seconds, preMs))
	}
	for _, k := range survivors {
		k.expect(t, "DEGRADE loading")
	}
	c.procs[victim].Kill()
	c.procs[victim].Wait()
	var res []degradeResult
	for _, k := range survivors {
		res = append(res, degradeReport(t, k, n))
	}
	first, last := res[0].first, res[0].last
	for _, r := range res[1:] {
		if r.first.Before(first) {
			first = r.first
		}
		if r.last.After(last) {
			last = r.last
		}
	}
	window := last.Sub(first)
	limit := degradeCapacity + int64(math.Ceil(degradeRate*window.Seconds()))
	const share = (degradeCapacity + 2) / 3
	var sum struct {
		admitted, refused, local, localAdmitted, failed, worst        int64
		plainAdmitted, plainRefused, plainFailed, plainFailedMs, keys int64
	}
	for i := range n {
		var k degradeTally
		grid := int64(0) // admitted through the grid by both survivors
		for _, r := range res {
			grid += r.keys[i].admitted - r.keys[i].localAdmitted
		}
		floor := min(share, max(degradeCapacity-grid, 0)/3)
		for _, r := range res {
			x := r.keys[i]
			k.admitted, k.refused, k.failed = k.admitted+x.admitted, k.refused+x.refused, k.failed+x.failed
			k.localAdmitted, k.localRefused = k.localAdmitted+x.localAdmitted, k.localRefused+x.localRefused
			if x.localRefused > 0 && x.localAdmitted < floor {
				t.Errorf("key dgd%d: a survivor refused %d checks locally after admitting %d, below its share %d (%d admitted through the grid)",
					i, x.localRefused, x.localAdmitted, floor, grid)
			}
		}
		if k.failed > 0 {
			t.Errorf("key dgd%d: %d checks failed with degrade on, want none", i, k.failed)
		}
		if deadD[i] {
			if k.admitted > limit+degradeCapacity {
				t.Errorf("key dgd%d of the dead member: %d admitted over %v, above its limit %d plus one capacity",
					i, k.admitted, window.Round(time.Millisecond), limit)
			}
			sum.admitted, sum.refused, sum.failed = sum.admitted+k.admitted, sum.refused+k.refused, sum.failed+k.failed
			sum.local += k.localAdmitted + k.localRefused
			sum.localAdmitted += k.localAdmitted
			sum.worst = max(sum.worst, k.admitted)
		}
		if deadO[i] {
			var o degradeTally
			for _, r := range res {
				x := r.keys[i]
				o.plainAdmitted, o.plainRefused, o.plainFailed = o.plainAdmitted+x.plainAdmitted, o.plainRefused+x.plainRefused, o.plainFailed+x.plainFailed
				o.plainFailedMs += x.plainFailedMs
			}
			sum.plainAdmitted, sum.plainRefused, sum.plainFailed = sum.plainAdmitted+o.plainAdmitted, sum.plainRefused+o.plainRefused, sum.plainFailed+o.plainFailed
			sum.plainFailedMs += o.plainFailedMs
			sum.keys++
		}
	}
	d, o := int64(len(deadD)), sum.keys
	t.Logf("%v of load, a member killed after %d ms; per key of the dead member, limit over the load %d: "+
		"without degrade %d admitted, %d refused (%d checks failed on its %d keys, after %d ms of waiting each; fail-open admits them, fail-closed refuses them); "+
		"with degrade %d admitted (at most %d), %d refused, %d decided locally (%d admitted), %d failed; charged back %d tokens, %d charges failed",
		window.Round(time.Millisecond), preMs, limit,
		sum.plainAdmitted/o, sum.plainRefused/o, sum.plainFailed, o, sum.plainFailedMs/max(sum.plainFailed, 1),
		sum.admitted/d, sum.worst, sum.refused/d, sum.local/d, sum.localAdmitted/d, sum.failed/d, res[0].charged+res[1].charged, res[0].chargeFailed+res[1].chargeFailed)
	if sum.plainFailed == 0 {
		t.Errorf("no check of the dead member's keys failed without degrade: the crash caused no outage to decide around")
	}
	if sum.local == 0 {
		t.Errorf("no check of the dead member's keys was decided locally")
	}
	c.stop(t)
}
