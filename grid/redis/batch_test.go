package redis_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	redis "github.com/bucketgrid/bucketgrid/grid/redis"
	"github.com/bucketgrid/bucketgrid/retry"
)

// tripCounter is a go-redis hook counting round trips (a command alone, or
// a pipeline) and the commands they carried.
type tripCounter struct{ trips, cmds atomic.Int64 }

func (c *tripCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *tripCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (c *tripCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// countedStore is a store on REDIS_ADDR whose round trips are counted.
func countedStore(t *testing.T) (*redis.Store, *tripCounter) {
	t.Helper()
	_, c := newStore(t) // the cleanup of the run's keys
	var n tripCounter
	counted := newClient(t, c.Options().Addr)
	counted.AddHook(&n)
	return redis.New(counted, redis.WithPrefix(runPrefix)), &n
}

// TestOneRoundTripPerCheck: through an executor, a check on a known bucket
// is one script call — no GET — and so is a check after another client
// wrote, because the lost race returns the winner.
func TestOneRoundTripPerCheck(t *testing.T) {
	s, n := countedStore(t)
	ctx := context.Background()
	cfg := func(context.Context) (core.Config, error) { return core.NewConfig(core.Greedy(100, 1, time.Hour)) }
	// retry at once: a delay drawn longer than the lost write's round trip
	// makes the executor read afresh (the winner it was told of has aged),
	// a round trip more that this test is not about
	now := retry.Backoff(retry.BackoffConfig{Rand: func(int64) int64 { return 0 }})
	a := bucketgrid.NewManager(cas.New(s, cas.WithRetry(now))).Bucket("one-trip", cfg)
	b := bucketgrid.NewManager(cas.New(s, cas.WithRetry(now))).Bucket("one-trip", cfg)
	if _, err := a.TryConsume(ctx, 1); err != nil { // creation: GET, GET, script
		t.Fatal(err)
	}
	if _, err := b.TryConsume(ctx, 1); err != nil { // B's first: a GET and a script
		t.Fatal(err)
	}
	for i, tc := range []struct {
		what  string
		trips int64
	}{
		{"A after B wrote: a script that loses and returns B's bucket, then one that wins", 2},
		{"A again: one script", 1},
		{"A again: one script", 1},
	} {
		before := n.trips.Load()
		if ok, err := a.TryConsume(ctx, 1); err != nil || !ok {
			t.Fatalf("check %d: ok=%v err=%v", i, ok, err)
		}
		if got := n.trips.Load() - before; got != tc.trips {
			t.Errorf("%s: %d round trips, want %d", tc.what, got, tc.trips)
		}
	}
	if left, err := b.AvailableTokens(ctx); err != nil || left != 95 {
		t.Fatalf("%d tokens left (%v), want 95", left, err)
	}
}

// TestConcurrentChecksSharePipelines: 16 callers on 16 keys each; the
// executor sends their scripts in shared pipelines, and every check is
// accounted for.
func TestConcurrentChecksSharePipelines(t *testing.T) {
	s, n := countedStore(t)
	e := cas.New(s)
	m := bucketgrid.NewManager(e)
	cfg := func(context.Context) (core.Config, error) { return core.NewConfig(core.Greedy(1000, 1, time.Hour)) }
	const callers, keys, rounds = 16, 16, 10
	var wg sync.WaitGroup
	var failed atomic.Int64
	for c := range callers {
		wg.Go(func() {
			for r := range rounds {
				for k := range keys {
					key := "share-" + strconv.Itoa(c) + "-" + strconv.Itoa((k+r)%keys)
					if ok, err := m.Bucket(key, cfg).TryConsume(context.Background(), 1); err != nil || !ok {
						failed.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d checks failed or were refused", f)
	}
	for c := range callers {
		left, err := m.Bucket("share-"+strconv.Itoa(c)+"-3", cfg).AvailableTokens(context.Background())
		if err != nil || left != 1000-rounds {
			t.Fatalf("caller %d's key 3: %d left (%v), want %d", c, left, err, 1000-rounds)
		}
	}
	st := e.Stats()
	t.Logf("%d checks: %d commands in %d round trips; executor %+v", callers*keys*rounds, n.cmds.Load(), n.trips.Load(), st)
	if n.trips.Load() >= n.cmds.Load() || st.Batched == 0 {
		t.Errorf("%d commands took %d round trips: concurrent checks on different keys did not share pipelines", n.cmds.Load(), n.trips.Load())
	}
}

// A batch after SCRIPT FLUSH falls back to EVAL for its scripts, writes,
// and still reads in the same pipeline.
func TestBatchNoScriptFallback(t *testing.T) {
	s, c := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ok, err := s.Insert(ctx, "batch-noscript-0", []byte("a"), 0); err != nil || !ok {
		t.Fatalf("Insert: ok=%v err=%v", ok, err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := redis.Fallbacks(s)
	ops := []*cas.Op{
		{Kind: cas.OpGet, Key: "batch-noscript-0"},
		{Kind: cas.OpInsert, Key: "batch-noscript-1", Data: []byte("b")},
		{Kind: cas.OpInsert, Key: "batch-noscript-2", Data: []byte("c")},
	}
	if err := s.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if r := ops[0].Result; r.Err != nil || !r.Found || string(r.Data) != "a" {
		t.Errorf("Get in the batch: %+v", r)
	}
	for _, op := range ops[1:] {
		if r := op.Result; r.Err != nil || !r.Written {
			t.Errorf("Insert of %s in the batch after SCRIPT FLUSH: %+v", op.Key, r)
		}
		if _, ver, found, err := s.Get(ctx, op.Key); err != nil || !found || ver != op.Result.Ver {
			t.Errorf("Get of %s after the batch: version %d found %v err %v; the batch reported %d", op.Key, ver, found, err, op.Result.Ver)
		}
	}
	if n := redis.Fallbacks(s) - before; n != 2 {
		t.Errorf("%d EVAL fallbacks, want 2", n)
	}
}
