package cas_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// batchStore is a memstore whose batches — and single calls, batches of
// one — can wait at a gate, fail for one key, fail as a whole or panic,
// and are recorded.
type batchStore struct {
	*memstore.Store
	mu      sync.Mutex
	sizes   []int           // ops per batch, in order
	seen    map[string]bool // keys that reached the store
	gate    chan struct{}   // when not nil, every batch waits for it
	failKey string          // ops on this key fail
	hangKey string          // a batch with an op on this key waits until its context ends
	failAll error           // every batch fails with it
	panics  atomic.Bool     // the next batch of more than one op panics
}

var errKey = errors.New("injected failure for one key")

func newBatchStore() *batchStore {
	return &batchStore{Store: memstore.New(), seen: map[string]bool{}}
}

func (s *batchStore) Batch(ctx context.Context, ops []*cas.Op) error {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(ops))
	for _, op := range ops {
		s.seen[op.Key] = true
	}
	gate, failKey, failAll, hangKey := s.gate, s.failKey, s.failAll, s.hangKey
	s.mu.Unlock()
	if hangKey != "" && slices.ContainsFunc(ops, func(op *cas.Op) bool { return op.Key == hangKey }) {
		<-ctx.Done()
		return ctx.Err()
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if failAll != nil {
		return failAll
	}
	if len(ops) > 1 && s.panics.CompareAndSwap(true, false) {
		panic("batch boom")
	}
	if err := s.Store.Batch(ctx, ops); err != nil {
		return err
	}
	for _, op := range ops {
		if op.Key == failKey {
			op.Result = cas.Result{Err: errKey}
		}
	}
	return nil
}

func (s *batchStore) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	op := &cas.Op{Kind: cas.OpGet, Key: key}
	if err := s.Batch(ctx, []*cas.Op{op}); err != nil {
		return nil, 0, false, err
	}
	return op.Result.Data, op.Result.Ver, op.Result.Found, op.Result.Err
}

func (s *batchStore) Write(ctx context.Context, op *cas.Op) error {
	if err := s.Batch(ctx, []*cas.Op{op}); err != nil {
		return err
	}
	return op.Result.Err
}

func (s *batchStore) batches() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes...)
}

func (s *batchStore) reached(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[key]
}

// inFlight starts a request on key "first" that holds the only batch slot
// at s's gate, and returns a channel of its error.
func inFlight(t *testing.T, e *cas.Executor, s *batchStore) chan error {
	t.Helper()
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
	done := make(chan error, 1)
	go func() { _, err := e.Execute(context.Background(), "first", createReq); done <- err }()
	waitUntil(t, "the first batch waits at the gate", func() bool { return len(s.batches()) == 1 })
	return done
}

func (s *batchStore) open() {
	s.mu.Lock()
	close(s.gate)
	s.gate = nil
	s.mu.Unlock()
}

// execAll runs createReq on each key concurrently and returns each error.
func execAll(e *cas.Executor, keys []string) []chan error {
	out := make([]chan error, len(keys))
	for i, k := range keys {
		out[i] = make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := e.Execute(ctx, k, createReq)
			if err == nil && resp.Status != wire.StatusOK {
				err = errors.New("status " + strconv.Itoa(int(resp.Status)))
			}
			out[i] <- err
		}()
	}
	return out
}

func keysN(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	return keys
}

// TestPipelineSharesRoundTrips: while a batch is in flight, the reads of
// eight requests on eight keys queue and go in one batch.
func TestPipelineSharesRoundTrips(t *testing.T) {
	s := newBatchStore()
	e := cas.New(s, cas.WithPipelining(cas.PipelineConfig{Flushes: 1, StallAfter: -1}))
	first := inFlight(t, e, s)
	results := execAll(e, keysN("k", 8))
	waitUntil(t, "eight reads queue", func() bool { return e.Stats().Reads == 9 })
	s.open()
	for i, r := range results {
		if err := <-r; err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	sizes := s.batches()
	if len(sizes) < 2 || sizes[1] != 8 {
		t.Fatalf("batch sizes %v: want the eight queued reads in the second batch", sizes)
	}
	if st := e.Stats(); st.Batched < 8 || st.RoundTrips > 2+9 { // two for the reads, at most one per write
		t.Fatalf("stats %+v: the eight reads should have shared one round trip", st)
	}
	for _, k := range append(keysN("k", 8), "first") {
		if _, ok := s.TTL(k); !ok {
			t.Fatalf("bucket %q was not created", k)
		}
	}
}

// TestPipelineQueuedCallerLeaves: a caller whose context ends while its
// read is queued returns at once, and its operation is never sent.
func TestPipelineQueuedCallerLeaves(t *testing.T) {
	s := newBatchStore()
	e := cas.New(s, cas.WithPipelining(cas.PipelineConfig{Flushes: 1, StallAfter: -1}))
	first := inFlight(t, e, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := e.Execute(ctx, "leaver", createReq); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued caller: %v, want its own deadline", err)
	}
	s.open()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if s.reached("leaver") {
		t.Fatal("the operation of a caller that left while queued was sent")
	}
}

// TestPipelineErrorOfOneKey: a store error on one operation of a batch
// fails that request only.
func TestPipelineErrorOfOneKey(t *testing.T) {
	s := newBatchStore()
	s.failKey = "k3"
	e := cas.New(s, cas.WithPipelining(cas.PipelineConfig{Flushes: 1, StallAfter: -1}))
	first := inFlight(t, e, s)
	results := execAll(e, keysN("k", 6))
	waitUntil(t, "six reads queue", func() bool { return e.Stats().Reads == 7 })
	s.open()
	for i, r := range results {
		err := <-r
		switch {
		case i == 3 && (!errors.Is(err, cas.ErrStore) || !errors.Is(err, errKey)):
			t.Errorf("the failing key: %v, want ErrStore wrapping its error", err)
		case i != 3 && err != nil:
			t.Errorf("key %d, in the same batch: %v", i, err)
		}
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.StoreErrors != 1 {
		t.Fatalf("stats %+v: want one store error", st)
	}
}

// TestPipelineWholeBatchFails: a batch that fails as a whole fails every
// request in it with ErrStore.
func TestPipelineWholeBatchFails(t *testing.T) {
	s := newBatchStore()
	e := cas.New(s, cas.WithPipelining(cas.PipelineConfig{Flushes: 1, StallAfter: -1}))
	first := inFlight(t, e, s)
	results := execAll(e, keysN("k", 5))
	waitUntil(t, "five reads queue", func() bool { return e.Stats().Reads == 6 })
	down := errors.New("connection reset")
	s.mu.Lock()
	s.failAll = down
	s.mu.Unlock()
	s.open()
	for i, r := range append(results, first) {
		if err := <-r; !errors.Is(err, cas.ErrStore) || !errors.Is(err, down) {
			t.Errorf("request %d: %v, want ErrStore wrapping the batch's failure", i, err)
		}
	}
}

// TestPipelinePanic: a panic in a shared batch reaches every caller in it,
// on the caller's goroutine, and the pipeline serves the next request.
func TestPipelinePanic(t *testing.T) {
	s := newBatchStore()
	e := cas.New(s, cas.WithPipelining(cas.PipelineConfig{Flushes: 1, StallAfter: -1}))
	first := inFlight(t, e, s)
	panics := make(chan any, 3)
	for _, k := range keysN("p", 3) {
		go func() {
			panics <- recovered(func() { e.Execute(context.Background(), k, createReq) })
		}()
	}
	waitUntil(t, "three reads queue", func() bool { return e.Stats().Reads == 4 })
	s.panics.Store(true)
	s.open()
	for range 3 {
		if p, ok := (<-panics).(*cas.PanicError); !ok || p.Value != "batch boom" {
			t.Fatalf("a caller of the panicking batch got %#v, want a *cas.PanicError", p)
		}
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	servedPromptly(t, e, "after")
}

// TestPipelineExactUnderLoad: 16 clients on 40 keys, some hot (coalesced
// rounds inside shared batches), over a store with latency: every grant
// is accounted for, and batches carried the load.
func TestPipelineExactUnderLoad(t *testing.T) {
	store := memstore.New(memstore.WithLatency(100 * time.Microsecond))
	e := cas.New(store)
	c, _ := core.NewConfig(core.Greedy(60, 1, time.Hour))
	m := bucketgrid.NewManager(e)
	keys := append(keysN("cold", 36), "hot", "hot", "hot", "hot")
	var granted [40]atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 60 {
				k := (g*7 + i*13) % len(keys)
				ok, err := m.Bucket(keys[k], func(context.Context) (core.Config, error) { return c, nil }).TryConsume(context.Background(), 1)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					granted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	perKey := map[string]int64{}
	for i, k := range keys {
		perKey[k] += granted[i].Load()
	}
	for k, g := range perKey {
		left, err := m.Bucket(k, nil).AvailableTokens(context.Background())
		if err != nil || g+left != 60 {
			t.Errorf("key %s: %d granted + %d left != 60 (%v)", k, g, left, err)
		}
	}
	s := e.Stats()
	t.Logf("%+v", s)
	if s.Batched == 0 || s.RoundTrips >= s.Requests {
		t.Errorf("stats %+v: concurrent checks on different keys should share round trips", s)
	}
}

// TestPipelineStalledBatch: a store that hangs on one key (a node down for
// its partition) holds the only batch in flight. With StallAfter the
// requests on other keys go on without it; with a batch holding its place
// until it returns (StallAfter < 0) they wait behind it, which is what
// StallAfter is for.
func TestPipelineStalledBatch(t *testing.T) {
	for _, tt := range []struct {
		name       string
		stallAfter time.Duration
	}{
		{"stall after 5ms", 5 * time.Millisecond},
		{"never stall", -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newBatchStore()
			s.hangKey = "stuck"
			e := cas.New(s, cas.WithPipelining(cas.PipelineConfig{Flushes: 1, StallAfter: tt.stallAfter}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stuck := make(chan error, 1)
			go func() { _, err := e.Execute(ctx, "stuck", createReq); stuck <- err }()
			waitUntil(t, "the stuck key reaches the store", func() bool { return s.reached("stuck") })

			results := execAll(e, keysN("k", 8))
			if tt.stallAfter < 0 {
				waitUntil(t, "eight reads queue", func() bool { return e.Stats().Reads == 9 })
				for i, r := range results {
					select {
					case err := <-r:
						t.Fatalf("request %d answered (%v) while the only batch in flight hangs", i, err)
					default:
					}
				}
				cancel() // the stuck caller gives up; its place comes back
			}
			for i, r := range results {
				if err := <-r; err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			if tt.stallAfter > 0 {
				select {
				case err := <-stuck:
					t.Fatalf("the stuck request returned (%v) before its caller gave up", err)
				default:
				}
				if n := e.Stats().Stalled; n < 1 {
					t.Fatalf("Stalled = %d, want at least the stuck batch", n)
				}
				cancel()
			}
			if err := <-stuck; !errors.Is(err, context.Canceled) {
				t.Fatalf("stuck request: %v, want its caller's cancellation", err)
			}
		})
	}
}
