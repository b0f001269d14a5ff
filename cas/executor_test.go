package cas_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/retry"
)

// The assertion lives here, outside package cas, so cas does not import the
// root package (and the .wasm filter, which uses cas, does not link it).
var _ bucketgrid.Executor = (*cas.Executor)(nil)

func cfg(t *testing.T) func(context.Context) (core.Config, error) {
	t.Helper()
	c, err := core.NewConfig(core.Greedy(10, 10, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return func(context.Context) (core.Config, error) { return c, nil }
}

func TestManagerOverMemstore(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	m := bucketgrid.NewManager(cas.New(memstore.New(memstore.WithClock(clk)), cas.WithClock(clk)))
	calls := 0
	b := m.Bucket("k", func(ctx context.Context) (core.Config, error) { calls++; return cfg(t)(ctx) })
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if ok, err := b.TryConsume(ctx, 1); !ok || err != nil {
			t.Fatalf("consume %d: %v %v", i, ok, err)
		}
	}
	if ok, _ := b.TryConsume(ctx, 1); ok {
		t.Fatal("11th token granted")
	}
	if calls != 1 {
		t.Fatalf("configuration function ran %d times, want 1", calls)
	}
	clk.Advance(100 * time.Millisecond)
	if ok, _ := b.TryConsume(ctx, 1); !ok {
		t.Fatal("refilled token refused")
	}
}

// conflictStore loses the first n races.
type conflictStore struct {
	cas.Store
	lose int
}

func (s *conflictStore) Replace(ctx context.Context, k string, d []byte, v cas.Version, ttl time.Duration) (bool, error) {
	if s.lose > 0 {
		s.lose--
		return false, nil
	}
	return s.Store.Replace(ctx, k, d, v, ttl)
}

func TestExecutorGivesUpWithErrConflict(t *testing.T) {
	st := &conflictStore{Store: memstore.New(), lose: 100}
	e := cas.New(st, cas.WithRetry(retry.Immediate(3)))
	m := bucketgrid.NewManager(e)
	b := m.Bucket("k", cfg(t))
	ctx := context.Background()
	if _, err := b.TryConsume(ctx, 1); err != nil { // creation uses Insert
		t.Fatal(err)
	}
	_, err := b.TryConsume(ctx, 1)
	if !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	if s := e.Stats(); s.Conflicts != 3 {
		t.Fatalf("conflicts = %d, want 3 (attempts honoured)", s.Conflicts)
	}
}

// failStore fails every operation.
type failStore struct{ cas.Store }

var errDown = errors.New("store down")

func (failStore) Get(context.Context, string) ([]byte, cas.Version, bool, error) {
	return nil, 0, false, errDown
}

func (failStore) Delete(context.Context, string) error { return errDown }

// TestErrorsRedactKeys: keys are API keys, so no error carries one; the
// redacted form identifies the key instead.
func TestErrorsRedactKeys(t *testing.T) {
	const key = "sk_live_0123456789abcdef"
	ctx := context.Background()
	req := wire.Request{Ops: []wire.Op{{Kind: wire.OpTryConsume, Tokens: 1}}}
	_, storeErr := cas.New(failStore{}).Execute(ctx, key, req)
	removeErr := cas.New(failStore{}).Remove(ctx, key)
	st := &conflictStore{Store: memstore.New(), lose: 100}
	e := cas.New(st, cas.WithRetry(retry.Immediate(2)))
	if _, err := bucketgrid.NewManager(e).Bucket(key, cfg(t)).TryConsume(ctx, 1); err != nil {
		t.Fatal(err)
	}
	_, conflictErr := bucketgrid.NewManager(e).Bucket(key, cfg(t)).TryConsume(ctx, 1)
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"store", storeErr, cas.ErrStore},
		{"remove", removeErr, cas.ErrStore},
		{"conflict", conflictErr, cas.ErrConflict},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.want) {
			t.Fatalf("%s: err = %v, want %v", tt.name, tt.err, tt.want)
		}
		if msg := tt.err.Error(); strings.Contains(msg, key) || !strings.Contains(msg, core.RedactKey(key)) {
			t.Fatalf("%s: %q must show %s, never the key", tt.name, msg, core.RedactKey(key))
		}
	}
}

func TestCoalescingSavesRoundsAndStaysExact(t *testing.T) {
	store := memstore.New(memstore.WithLatency(200 * time.Microsecond))
	e := cas.New(store)
	c, _ := core.NewConfig(core.Greedy(1000, 1, time.Hour))
	m := bucketgrid.NewManager(e)
	ctx := context.Background()
	var wg sync.WaitGroup
	var granted atomic.Int64
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := m.Bucket("hot", func(context.Context) (core.Config, error) { return c, nil })
			for i := 0; i < 50; i++ {
				ok, err := h.TryConsume(ctx, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					granted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	left, _ := m.Bucket("hot", nil).AvailableTokens(ctx)
	if granted.Load() != 800 || left != 200 {
		t.Fatalf("granted %d, left %d; want 800 and 200", granted.Load(), left)
	}
	s := e.Stats()
	if s.Rounds*2 > s.Requests {
		t.Fatalf("%d requests took %d rounds: concurrent requests were not coalesced", s.Requests, s.Rounds)
	}
	t.Logf("%d requests, %d rounds, %d attempts, %d conflicts", s.Requests, s.Rounds, s.Attempts, s.Conflicts)
}

// gateStore blocks every Get until the gate opens.
type gateStore struct {
	cas.Store
	gate chan struct{}
}

func (s *gateStore) Get(ctx context.Context, k string) ([]byte, cas.Version, bool, error) {
	select {
	case <-s.gate:
	case <-ctx.Done():
		return nil, 0, false, ctx.Err()
	}
	return s.Store.Get(ctx, k)
}

func TestWithdrawnRequestIsNeverApplied(t *testing.T) {
	inner := memstore.New()
	gs := &gateStore{Store: inner, gate: make(chan struct{})}
	e := cas.New(gs)
	c, _ := core.NewConfig(core.Greedy(10, 1, time.Hour))
	h := bucketgrid.NewManager(e).Bucket("k", func(context.Context) (core.Config, error) { return c, nil })
	bg := context.Background()
	close(gs.gate)
	if _, err := h.TryConsume(bg, 1); err != nil { // create
		t.Fatal(err)
	}
	gs.gate = make(chan struct{})
	leaderDone := make(chan error)
	go func() { _, err := h.TryConsume(bg, 1); leaderDone <- err }()
	for e.Stats().Requests < 2 { // the leader is in its round, blocked on the gate
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	if _, err := h.TryConsume(ctx, 5); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued request: %v, want DeadlineExceeded", err)
	}
	close(gs.gate)
	if err := <-leaderDone; err != nil {
		t.Fatal(err)
	}
	if n, _ := h.AvailableTokens(bg); n != 8 {
		t.Fatalf("%d tokens left, want 8: the withdrawn request was applied", n)
	}
}
