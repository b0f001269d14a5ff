package cas_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/retry"
)

func cfg(t *testing.T) bucketgrid.ConfigFunc {
	t.Helper()
	c, err := core.NewConfig(core.Greedy(10, 10, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return func(context.Context) (core.Config, error) { return c, nil }
}

func TestManagerOverMemstore(t *testing.T) {
	clock := bucketgrid.NewFakeClock(time.Unix(1_700_000_000, 0))
	m := bucketgrid.NewManager(cas.New(memstore.New(memstore.WithClock(clock.Now)), cas.WithClock(clock.Now)))
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
	clock.Advance(100 * time.Millisecond)
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
