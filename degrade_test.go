package bucketgrid_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// Outage modes of an outageStore.
const (
	storeUp int32 = iota
	storeDown
	storeHangs
)

var errStoreDown = errors.New("connection refused")

// outageStore is a memstore that can be taken down (every call fails at
// once) or made to hang (every call waits for its context), counting calls.
type outageStore struct {
	cas.Store
	mode  atomic.Int32
	calls atomic.Int64
}

func (s *outageStore) fault(ctx context.Context) error {
	s.calls.Add(1)
	switch s.mode.Load() {
	case storeDown:
		return errStoreDown
	case storeHangs:
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *outageStore) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	if err := s.fault(ctx); err != nil {
		return nil, 0, false, err
	}
	return s.Store.Get(ctx, key)
}

func (s *outageStore) Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (bool, error) {
	if err := s.fault(ctx); err != nil {
		return false, err
	}
	return s.Store.Insert(ctx, key, data, ttl)
}

func (s *outageStore) Replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	if err := s.fault(ctx); err != nil {
		return false, err
	}
	return s.Store.Replace(ctx, key, data, ver, ttl)
}

type degradeFixture struct {
	clock     *clock.Fake
	store     *outageStore
	m         *bucketgrid.Manager
	instances atomic.Int32
}

// probe is the fixture's Degrade.Probe.
const probe = time.Second

// storeWait is the tests' Degrade.Timeout: long enough that a store call
// made slow by a loaded machine under -race (tens of milliseconds) is not
// taken for an outage, so that only a down or hung store is decided
// locally where a test expects it.
const storeWait = 500 * time.Millisecond

func newDegradeFixture(t *testing.T, opts ...bucketgrid.ManagerOption) *degradeFixture {
	t.Helper()
	f := &degradeFixture{clock: clock.NewFake(time.Unix(1_800_000_000, 0))}
	f.instances.Store(3)
	f.store = &outageStore{Store: memstore.New(memstore.WithClock(f.clock))}
	d := bucketgrid.Degrade{Instances: func() int { return int(f.instances.Load()) },
		Timeout: storeWait}.Tuned(2, probe, 0)
	opts = append([]bucketgrid.ManagerOption{bucketgrid.WithClock(f.clock), bucketgrid.WithDegrade(d)}, opts...)
	f.m = bucketgrid.NewManager(cas.New(f.store, cas.WithClock(f.clock)), opts...)
	return f
}

// nine is 9 tokens an hour: refill is negligible over the seconds a test
// advances its clock.
func nine(context.Context) (core.Config, error) { return core.NewConfig(core.Greedy(9, 9, time.Hour)) }

// waitFor polls cond with a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// tryConsume is TryConsume through Handle.Execute, which also says how the
// consumption was decided: the share it was cut for, 0 by the executor.
func tryConsume(ctx context.Context, h *bucketgrid.Handle, n int64) (ok bool, share int, err error) {
	res, share, err := h.Execute(ctx, wire.Op{Kind: wire.OpTryConsume, Tokens: n})
	if err != nil {
		return false, 0, err
	}
	return res[0].OK, share, nil
}

// consumeAll takes one token at a time until refused and returns how many
// it took, checking that every decision was degraded (or none).
func consumeAll(t *testing.T, h *bucketgrid.Handle, wantDegraded bool) int {
	t.Helper()
	for n := 0; n < 100; n++ {
		ok, share, err := tryConsume(context.Background(), h, 1)
		if err != nil {
			t.Fatalf("consume %d: %v", n, err)
		}
		if (share > 0) != wantDegraded {
			t.Fatalf("consume %d: decided from a share of %d instances, want degraded %v", n, share, wantDegraded)
		}
		if !ok {
			return n
		}
	}
	t.Fatalf("bucket never refused")
	return 0
}

func TestDegradeDecidesFromShare(t *testing.T) {
	f := newDegradeFixture(t)
	f.store.mode.Store(storeDown)
	h := f.m.Bucket("k", nine)
	if got := consumeAll(t, h, true); got != 3 {
		t.Fatalf("admitted %d from the share of 9 over 3 instances, want 3", got)
	}
	st := f.m.Stats()
	if st.Degraded != 4 || st.BreakerOpens != 1 || st.OpenBreakers != 1 || st.LocalBuckets != 1 {
		t.Fatalf("stats %+v, want 4 degraded, one breaker opened and open, one local bucket", st)
	}
	// the breaker is open: no more waiting on the store until a probe is due
	calls := f.store.calls.Load()
	v, err := h.TryConsumeAndReturnRemainingVerbose(context.Background(), 1)
	if err != nil || v.Probe.Consumed || v.Share != 3 {
		t.Fatalf("verbose consume: %+v %v, want refused by the share of 3", v.Probe, err)
	}
	if got := v.Diagnostics.State.Config.Bandwidths[0].Capacity; got != 3 {
		t.Fatalf("diagnostics describe capacity %d, want the share's 3", got)
	}
	if f.store.calls.Load() != calls {
		t.Fatalf("an open breaker still called the store")
	}
}

func TestDegradeBreakerProbesAndCharges(t *testing.T) {
	f := newDegradeFixture(t)
	ctx := context.Background()
	h := f.m.Bucket("k", nine)
	if ok, err := h.TryConsume(ctx, 1); !ok || err != nil {
		t.Fatalf("first consume with the store up: %v %v", ok, err)
	}
	f.store.mode.Store(storeDown)
	if got := consumeAll(t, h, true); got != 3 {
		t.Fatalf("admitted %d while down, want the share's 3", got)
	}
	calls := f.store.calls.Load()
	f.clock.Advance(probe - time.Nanosecond)
	consumeAll(t, h, true)
	if f.store.calls.Load() != calls {
		t.Fatalf("probed before Probe elapsed")
	}
	f.clock.Advance(time.Nanosecond)
	h.AvailableTokens(ctx) // starts a probe, which fails
	waitFor(t, "the failed probe", func() bool { return f.store.calls.Load() > calls })
	if f.m.Stats().OpenBreakers != 1 {
		t.Fatalf("a failed probe closed the breaker")
	}
	f.store.mode.Store(storeUp)
	waitFor(t, "the breaker to close and the charge", func() bool {
		st := f.m.Stats()
		if st.OpenBreakers != 0 {
			// the failed probe may not have ended yet: start another
			f.clock.Advance(probe)
			h.AvailableTokens(ctx)
			return false
		}
		return st.Charged+st.ChargeFailed > 0
	})
	if st := f.m.Stats(); st.Charged != 3 || st.ChargeFailed != 0 {
		t.Fatalf("stats %+v, want the 3 local tokens charged", st)
	}
	// the real bucket: 9 - 1 before the outage - 3 charged
	if got, err := h.AvailableTokens(ctx); got != 5 || err != nil {
		t.Fatalf("real bucket holds %d (%v), want 5", got, err)
	}
}

func TestDegradeChargeNeverMints(t *testing.T) {
	f := newDegradeFixture(t)
	ctx := context.Background()
	h := f.m.Bucket("k", nine)
	for i := 0; i < 7; i++ {
		if ok, err := h.TryConsume(ctx, 1); !ok || err != nil {
			t.Fatalf("consume %d: %v %v", i, ok, err)
		}
	}
	f.store.mode.Store(storeDown)
	if got := consumeAll(t, h, true); got != 3 {
		t.Fatalf("admitted %d while down, want 3", got)
	}
	f.store.mode.Store(storeUp)
	f.clock.Advance(probe)
	h.AvailableTokens(ctx)
	waitFor(t, "the charge", func() bool { st := f.m.Stats(); return st.Charged+st.ChargeFailed > 0 })
	if st := f.m.Stats(); st.Charged != 2 {
		t.Fatalf("charged %d, want the 2 the bucket held", st.Charged)
	}
	if got, err := h.AvailableTokens(ctx); got != 0 || err != nil {
		t.Fatalf("real bucket holds %d (%v), want 0: charged, never below, never above", got, err)
	}
}

func TestDegradeChargesOnTheKeysNextAnswer(t *testing.T) {
	// an outage too short to open the breaker: the key's next answer from
	// the store charges what it consumed locally
	f := newDegradeFixture(t)
	ctx := context.Background()
	h := f.m.Bucket("k", nine)
	f.store.mode.Store(storeDown)
	if ok, share, err := tryConsume(ctx, h, 1); !ok || err != nil || share == 0 {
		t.Fatalf("consume while down: %v %v share %d", ok, err, share)
	}
	f.store.mode.Store(storeUp)
	if ok, err := h.TryConsume(ctx, 1); !ok || err != nil {
		t.Fatalf("consume after: %v %v", ok, err)
	}
	waitFor(t, "the charge", func() bool { return f.m.Stats().Charged == 1 })
	if got, err := h.AvailableTokens(ctx); got != 7 || err != nil {
		t.Fatalf("real bucket holds %d (%v), want 7", got, err)
	}
	if st := f.m.Stats(); st.BreakerOpens != 0 {
		t.Fatalf("one outage opened the breaker: %+v", st)
	}
}

func TestDegradeHangingStore(t *testing.T) {
	f := newDegradeFixture(t)
	f.store.mode.Store(storeHangs)
	h := f.m.Bucket("k", nine)
	// the caller's context has no deadline: Degrade.Timeout bounds the wait
	if got := consumeAll(t, h, true); got != 3 {
		t.Fatalf("admitted %d while the store hangs, want 3", got)
	}
	// a caller whose own context ends gets its error, not a local decision
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f2 := newDegradeFixture(t)
	f2.store.mode.Store(storeHangs)
	if _, err := f2.m.Bucket("k", nine).TryConsume(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled caller: %v, want context.Canceled", err)
	}
	if st := f2.m.Stats(); st.Degraded != 0 {
		t.Fatalf("a canceled caller was decided locally")
	}
}

func TestDegradeRecutsOnInstanceChange(t *testing.T) {
	f := newDegradeFixture(t)
	f.store.mode.Store(storeDown)
	h := f.m.Bucket("k", nine)
	ctx := context.Background()
	if ok, _ := h.TryConsume(ctx, 2); !ok {
		t.Fatalf("2 of the share of 3 refused")
	}
	f.instances.Store(1) // the share becomes the whole limit, tokens carried over proportionally
	if got, err := h.AvailableTokens(ctx); got != 3 || err != nil {
		t.Fatalf("after the re-cut: %d (%v), want 1 of 3 → 3 of 9", got, err)
	}
	f.instances.Store(0) // below 1 counts as 1
	if got, _ := h.AvailableTokens(ctx); got != 3 {
		t.Fatalf("0 instances: %d, want 3", got)
	}
}

// errExecutor fails every request with err, or panics with it.
type errExecutor struct {
	err   error
	panic bool
	calls atomic.Int64
}

func (e *errExecutor) Execute(context.Context, string, wire.Request) (wire.Response, error) {
	e.calls.Add(1)
	if e.panic {
		panic(e.err)
	}
	return wire.Response{}, e.err
}

func (e *errExecutor) Remove(context.Context, string) error { return e.err }

func (e *errExecutor) Outage(err error) bool { return !errors.Is(err, cas.ErrConflict) }

func TestDegradeKeepsOtherErrors(t *testing.T) {
	bad := func(context.Context) (core.Config, error) { return core.Config{}, nil }
	tests := []struct {
		name     string
		err      error
		configFn func(context.Context) (core.Config, error)
		want     error
	}{
		{"invalid key", core.InvalidKey("k", "too long"), nine, core.ErrInvalidKey},
		{"corrupt record", fmt.Errorf("store: %w", core.ErrCorruptState), nine, core.ErrCorruptState},
		{"invalid request", fmt.Errorf("x: %w", wire.ErrInvalidRequest), nine, wire.ErrInvalidRequest},
		{"configuration error", &core.ConfigError{Bandwidth: -1, Err: core.ErrNoBandwidths}, nine, core.ErrNoBandwidths},
		{"contended key", fmt.Errorf("x: %w", cas.ErrConflict), nine, cas.ErrConflict},
		{"outage, invalid configuration function", errStoreDown, bad, core.ErrNoBandwidths},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &errExecutor{err: tt.err}
			m := bucketgrid.NewManager(e, bucketgrid.WithDegrade(bucketgrid.Degrade{Instances: func() int { return 2 }}))
			h := m.Bucket("k", tt.configFn)
			for range 5 { // past the failures that open a breaker: none opens either
				if _, err := h.TryConsume(context.Background(), 1); !errors.Is(err, tt.want) {
					t.Fatalf("error %v, want %v", err, tt.want)
				}
			}
			st := m.Stats()
			if st.Degraded != 0 || (st.BreakerOpens != 0) != errors.Is(tt.err, errStoreDown) {
				t.Fatalf("stats %+v: degraded on a failure that is no outage, or a breaker misjudged", st)
			}
		})
	}
	t.Run("panic", func(t *testing.T) {
		e := &errExecutor{err: errStoreDown, panic: true}
		m := bucketgrid.NewManager(e, bucketgrid.WithDegrade(bucketgrid.Degrade{}))
		defer func() {
			if v := recover(); v != errStoreDown {
				t.Fatalf("recovered %v, want the executor's panic", v)
			}
		}()
		m.Bucket("k", nine).TryConsume(context.Background(), 1)
	})
	t.Run("configuration replacement", func(t *testing.T) {
		// decided locally too: the share is replaced by the new
		// configuration's share, never by the whole limit
		e := &errExecutor{err: errStoreDown}
		m := bucketgrid.NewManager(e, bucketgrid.WithDegrade(bucketgrid.Degrade{Instances: func() int { return 3 }}))
		h := m.Bucket("k", nine)
		cfg, _ := core.NewConfig(core.Greedy(30, 30, time.Hour))
		if err := h.ReplaceConfiguration(context.Background(), cfg, core.InheritReset); err != nil {
			t.Fatalf("replacement during an outage: %v", err)
		}
		if got := consumeAll(t, h, true); got != 10 {
			t.Fatalf("admitted %d after replacing 9 by 30 over 3 instances, want 10", got)
		}
	})
}

// routedExecutor routes keys by their first byte; the routes in down fail.
type routedExecutor struct {
	bucketgrid.Executor
	down map[string]bool
}

func (r *routedExecutor) Route(key string) string { return key[:1] }

func (r *routedExecutor) Execute(ctx context.Context, key string, req wire.Request) (wire.Response, error) {
	if r.down[r.Route(key)] {
		return wire.Response{}, errStoreDown
	}
	return r.Executor.Execute(ctx, key, req)
}

func TestDegradeBreakerPerRoute(t *testing.T) {
	c := clock.NewFake(time.Unix(1_800_000_000, 0))
	exec := &routedExecutor{Executor: cas.New(memstore.New(memstore.WithClock(c)), cas.WithClock(c)),
		down: map[string]bool{"a": true}}
	m := bucketgrid.NewManager(exec, bucketgrid.WithClock(c),
		bucketgrid.WithDegrade(bucketgrid.Degrade{Instances: func() int { return 3 }}.Tuned(1, 0, 0)))
	if got := consumeAll(t, m.Bucket("a1", nine), true); got != 3 {
		t.Fatalf("down route admitted %d, want 3", got)
	}
	if got := consumeAll(t, m.Bucket("b1", nine), false); got != 9 {
		t.Fatalf("up route admitted %d, want the real 9", got)
	}
	if st := m.Stats(); st.OpenBreakers != 1 {
		t.Fatalf("%d breakers open, want only route a's", st.OpenBreakers)
	}
}

func TestDegradeUsesLiveCounter(t *testing.T) {
	c := clock.NewFake(time.Unix(1_800_000_000, 0))
	m := bucketgrid.NewManager(liveExecutor{&errExecutor{err: errStoreDown}}, bucketgrid.WithClock(c),
		bucketgrid.WithDegrade(bucketgrid.Degrade{}))
	if got := consumeAll(t, m.Bucket("k", nine), true); got != 2 {
		t.Fatalf("admitted %d with 5 live instances, want ⌈9/5⌉ = 2", got)
	}
	if st := m.Stats(); st.Instances != 5 {
		t.Fatalf("Stats().Instances = %d, want the 5 live instances", st.Instances)
	}
}

type liveExecutor struct{ *errExecutor }

func (liveExecutor) LiveInstances() int { return 5 }

func TestDegradeBoundsLocalBuckets(t *testing.T) {
	f := newDegradeFixture(t, bucketgrid.WithDegrade(bucketgrid.Degrade{Instances: func() int { return 3 }}.Tuned(0, 0, 4)))
	f.store.mode.Store(storeDown)
	for i := range 10 {
		if ok, err := f.m.Bucket(fmt.Sprint("k", i), nine).TryConsume(context.Background(), 1); !ok || err != nil {
			t.Fatalf("key %d: %v %v", i, ok, err)
		}
	}
	if st := f.m.Stats(); st.LocalBuckets != 4 || st.Dropped != 6 {
		t.Fatalf("stats %+v, want 4 local buckets kept and 6 dropped", st)
	}
}

func TestManagerDegraded(t *testing.T) {
	e := &errExecutor{err: errStoreDown}
	m := bucketgrid.NewManager(e)
	if _, err := m.Bucket("k", nine).TryConsume(context.Background(), 1); !errors.Is(err, errStoreDown) {
		t.Fatalf("without degrade: %v, want the outage", err)
	}
	d := m.Degraded(bucketgrid.Degrade{Instances: func() int { return 3 }})
	if got := consumeAll(t, d.Bucket("k", nine), true); got != 3 {
		t.Fatalf("derived Manager admitted %d, want 3", got)
	}
	if m.Stats().Degraded != 0 {
		t.Fatalf("the derived Manager's decisions counted on the original")
	}
}

func TestDegradeShareOutlivesAShortReturn(t *testing.T) {
	f := newDegradeFixture(t, bucketgrid.WithDegrade(bucketgrid.Degrade{Instances: func() int { return 3 }}.Tuned(1000, 0, 0)))
	ctx := context.Background()
	h := f.m.Bucket("k", nine)
	f.store.mode.Store(storeDown)
	if got := consumeAll(t, h, true); got != 3 {
		t.Fatalf("admitted %d while down, want 3", got)
	}
	f.store.mode.Store(storeUp)
	if ok, err := h.TryConsume(ctx, 1); !ok || err != nil { // the store answers: 3 charged
		t.Fatalf("consume with the store back: %v %v", ok, err)
	}
	waitFor(t, "the charge", func() bool { return f.m.Stats().Charged == 3 })
	// down again at once: the spent share goes on, no fresh one
	f.store.mode.Store(storeDown)
	if got := consumeAll(t, h, true); got != 0 {
		t.Fatalf("admitted %d from a share spent a moment ago, want 0", got)
	}
	// a new outage after a long healthy spell starts from a full share
	f.store.mode.Store(storeUp)
	if _, err := h.TryConsume(ctx, 1); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(2 * time.Minute)
	if _, err := h.TryConsume(ctx, 1); err != nil { // answered: the old share is forgotten
		t.Fatal(err)
	}
	f.store.mode.Store(storeDown)
	if got := consumeAll(t, h, true); got != 3 {
		t.Fatalf("admitted %d in a new outage, want a full share of 3", got)
	}
}

// BenchmarkDegrade measures what degrade costs a Manager whose backend
// answers (a memstore: the cost of the executor itself is as small as it
// gets, so the overhead shows), and what a decision from a local share
// costs once the breaker is open.
//
//	go test -run '^$' -bench Degrade -benchmem .
func BenchmarkDegrade(b *testing.B) {
	cfg := func(context.Context) (core.Config, error) {
		return core.NewConfig(core.Greedy(1<<40, 1<<29, time.Second))
	}
	d := bucketgrid.Degrade{Instances: func() int { return 3 }}
	for _, bc := range []struct {
		name      string
		down      bool
		remaining bool // TryConsumeAndReturnRemaining: the answer's tokens are kept (see Degrade)
		opts      []bucketgrid.ManagerOption
	}{
		{"backend-up/without", false, false, nil},
		{"backend-up/degrade", false, false, []bucketgrid.ManagerOption{bucketgrid.WithDegrade(d)}},
		{"backend-up/without/remaining", false, true, nil},
		{"backend-up/degrade/remaining", false, true, []bucketgrid.ManagerOption{bucketgrid.WithDegrade(d)}},
		{"breaker-open/degrade", true, false, []bucketgrid.ManagerOption{bucketgrid.WithDegrade(d)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := &outageStore{Store: memstore.New()}
			m := bucketgrid.NewManager(cas.New(s), bc.opts...)
			h := m.Bucket("k", cfg)
			ctx := context.Background()
			h.TryConsume(ctx, 1)
			if bc.down {
				s.mode.Store(storeDown)
				for m.Stats().OpenBreakers == 0 {
					h.TryConsume(ctx, 1)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if bc.remaining {
					if p, err := h.TryConsumeAndReturnRemaining(ctx, 1); !p.Consumed || err != nil {
						b.Fatal(p, err)
					}
				} else if ok, err := h.TryConsume(ctx, 1); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

func TestDegradeBatchCarryingItsConfiguration(t *testing.T) {
	// a rate-limit service sends each check with its rule's configuration
	// first: locally, that configuration's share decides
	m := bucketgrid.NewManager(&errExecutor{err: errStoreDown}, bucketgrid.WithEagerConfig(),
		bucketgrid.WithDegrade(bucketgrid.Degrade{Instances: func() int { return 3 }}))
	cfg, _ := nine(context.Background())
	admitted := 0
	for range 20 {
		res, _, err := m.Bucket("k", nine).Execute(context.Background(),
			wire.Op{Kind: wire.OpReplaceConfiguration, Config: &cfg, Inheritance: core.InheritAdditive},
			wire.Op{Kind: wire.OpTryConsumeAndReturnRemaining, Tokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res[1].OK {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d, want the share of 9 over 3: 3", admitted)
	}
}
