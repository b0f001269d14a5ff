package loadbench

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
)

// Capacity is every benchmark bucket's capacity: large enough that every
// check is admitted, so all sides do the same work, and refilled by one
// token a day, so that none comes back during a run and the tokens taken
// equal the checks admitted exactly.
const Capacity = 1_000_000_000

// Warm makes one check on every key before the timer starts, from
// l.Callers goroutines, so that a benchmark measures buckets that exist.
func Warm(b *testing.B, l Load) {
	b.Helper()
	var wg sync.WaitGroup
	for c := range l.Callers {
		wg.Go(func() {
			for k := c; k < l.Keys; k += l.Callers {
				if _, err := l.Check(context.Background(), k); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Verify fails b unless every key admitted every check Run sent to it and
// its bucket lost exactly that many tokens, one more for Warm's check; left
// reads a key's tokens.
func Verify(b *testing.B, admitted []int64, callers int, left func(k int) (int64, error)) {
	b.Helper()
	want := Expected(b.N, len(admitted))
	var wg sync.WaitGroup
	errs := make(chan string, callers)
	for c := range callers {
		wg.Go(func() {
			for k := c; k < len(admitted); k += callers {
				n, err := left(k)
				switch {
				case err != nil:
					errs <- err.Error()
					return
				case admitted[k] != want[k]:
					errs <- "key " + strconv.Itoa(k) + ": " + strconv.FormatInt(admitted[k], 10) + " of " + strconv.FormatInt(want[k], 10) + " checks admitted"
					return
				case Capacity-n != want[k]+1:
					errs <- "key " + strconv.Itoa(k) + ": " + strconv.FormatInt(Capacity-n, 10) + " tokens taken for " + strconv.FormatInt(want[k]+1, 10) + " checks"
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		b.Fatal("not exact: ", e)
	}
}

// CAS runs b.N TryConsume(1) checks from callers goroutines over keys keys
// of s, through one cas executor built with opts, after Warm, and verifies
// them with Verify through an executor without memory. It reports what Run
// reports, round trips counted by the executor (a batch counts once), and
// conflicts/check. serverCPU may be nil.
func CAS(b *testing.B, s cas.Store, callers, keys int, serverCPU func() time.Duration, opts ...cas.Option) {
	b.Helper()
	cfg, err := core.NewConfig(core.Intervally(Capacity, 1, 24*time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	configFn := func(context.Context) (core.Config, error) { return cfg, nil }
	exec := cas.New(s, opts...)
	m := bucketgrid.NewManager(exec)
	prefix := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	handles := make([]*bucketgrid.Handle, keys)
	for k := range handles {
		handles[k] = m.Bucket(prefix+strconv.Itoa(k), configFn)
	}
	l := Load{
		Callers:   callers,
		Keys:      keys,
		Check:     func(ctx context.Context, k int) (bool, error) { return handles[k].TryConsume(ctx, 1) },
		ServerCPU: serverCPU,
		Trips:     func() int64 { return exec.Stats().RoundTrips },
	}
	Warm(b, l)
	before := exec.Stats()
	admitted := Run(b, l)
	b.ReportMetric(float64(exec.Stats().Conflicts-before.Conflicts)/float64(b.N), "conflicts/check")
	check := bucketgrid.NewManager(cas.New(s, cas.WithoutMemory()))
	Verify(b, admitted, callers, func(k int) (int64, error) {
		return check.Bucket(prefix+strconv.Itoa(k), configFn).AvailableTokens(context.Background())
	})
	b.Cleanup(func() {
		for k := range handles {
			_ = m.RemoveBucket(context.Background(), prefix+strconv.Itoa(k))
		}
	})
}

// BeforeAfter runs CAS for each count of keys, through the executor as it
// was before its memory and pipelining ("before") and with its defaults
// ("after"), on a store from newStore per run, with 16 callers.
func BeforeAfter(b *testing.B, keys []int, newStore func(b *testing.B) cas.Store, serverCPU func() time.Duration) {
	for _, n := range keys {
		for _, side := range []struct {
			name string
			opts []cas.Option
		}{
			{"before", []cas.Option{cas.WithoutMemory(), cas.WithoutPipelining()}},
			{"after", nil},
		} {
			b.Run(side.name+"/keys="+strconv.Itoa(n), func(b *testing.B) {
				CAS(b, newStore(b), 16, n, serverCPU, side.opts...)
			})
		}
	}
}
