package cas_test

import (
	"context"
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

// twoNodes is a store shared by two executors, A and B, as by two
// processes, on one fake clock; A remembers buckets, B is any other client.
type twoNodes struct {
	clk   *clock.Fake
	store *memstore.Store
	a, b  *cas.Executor
	cfg   core.Config
}

func newTwoNodes(t *testing.T, opts ...cas.Option) *twoNodes {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	st := memstore.New(memstore.WithClock(clk))
	c, err := core.NewConfig(core.Greedy(10, 10, time.Minute)) // 1 token per 6 s
	if err != nil {
		t.Fatal(err)
	}
	return &twoNodes{clk: clk, store: st, cfg: c,
		a: cas.New(st, append([]cas.Option{cas.WithClock(clk)}, opts...)...),
		b: cas.New(st, cas.WithClock(clk), cas.WithoutMemory())}
}

func (n *twoNodes) handle(e *cas.Executor, key string, opts ...bucketgrid.ManagerOption) *bucketgrid.Handle {
	cfg := n.cfg
	return bucketgrid.NewManager(e, opts...).Bucket(key, func(context.Context) (core.Config, error) { return cfg, nil })
}

// consumeFromMemory consumes n tokens through h and fails unless it cost A
// exactly one round trip and no read: the steady state the memory is for.
func consumeFromMemory(t *testing.T, e *cas.Executor, h *bucketgrid.Handle, n int64) {
	t.Helper()
	before := e.Stats()
	if ok, err := h.TryConsume(context.Background(), n); err != nil || !ok {
		t.Fatalf("TryConsume(%d): ok=%v err=%v", n, ok, err)
	}
	s := e.Stats()
	if trips, reads := s.RoundTrips-before.RoundTrips, s.Reads-before.Reads; trips != 1 || reads != 0 {
		t.Fatalf("a check on a remembered key took %d round trips and %d reads, want 1 and 0", trips, reads)
	}
}

func TestMemoryOneRoundTripPerCheck(t *testing.T) {
	n := newTwoNodes(t)
	h := n.handle(n.a, "k")
	ctx := context.Background()
	if ok, err := h.TryConsume(ctx, 1); err != nil || !ok { // creates: read + insert
		t.Fatal(ok, err)
	}
	for range 5 {
		consumeFromMemory(t, n.a, h, 1)
	}
	if left, _ := n.handle(n.b, "k").AvailableTokens(ctx); left != 4 {
		t.Fatalf("%d tokens left after 6 checks of 1, want 4", left)
	}
	if s := n.a.Stats(); s.MemoryWrites != 5 || s.MemoryConflicts != 0 {
		t.Fatalf("stats %+v: want 5 writes from memory, none lost", s)
	}
}

// TestMemoryNeverAnswersWhatItCannotConfirm: after another client's write,
// every request of A — one that writes (from memory, refused, then
// re-read) and those that write nothing (never answered from memory) —
// sees that write.
func TestMemoryNeverAnswersWhatItCannotConfirm(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		other func(b *bucketgrid.Handle) error // B's write, after A drained the bucket to 2 tokens
		check func(t *testing.T, a *bucketgrid.Handle)
	}{
		{"another client consumes; A consumes", func(b *bucketgrid.Handle) error { _, err := b.TryConsume(ctx, 2); return err },
			func(t *testing.T, a *bucketgrid.Handle) {
				if ok, err := a.TryConsume(ctx, 1); err != nil || ok {
					t.Fatalf("A's TryConsume(1) on a bucket B emptied: ok=%v err=%v, want refused", ok, err)
				}
			}},
		{"another client adds tokens; A's rejection from memory would be wrong", func(b *bucketgrid.Handle) error { return b.AddTokens(ctx, 5) },
			func(t *testing.T, a *bucketgrid.Handle) {
				if ok, err := a.TryConsume(ctx, 7); err != nil || !ok {
					t.Fatalf("A's TryConsume(7) after B added 5 to 2: ok=%v err=%v, want granted", ok, err)
				}
			}},
		{"another client resets; A reads available tokens", func(b *bucketgrid.Handle) error { return b.Reset(ctx) },
			func(t *testing.T, a *bucketgrid.Handle) {
				if n, err := a.AvailableTokens(ctx); err != nil || n != 10 {
					t.Fatalf("A's AvailableTokens after B's reset: %d, %v; want 10", n, err)
				}
			}},
		{"another client consumes; A estimates", func(b *bucketgrid.Handle) error { _, err := b.TryConsume(ctx, 2); return err },
			func(t *testing.T, a *bucketgrid.Handle) {
				est, err := a.EstimateAbilityToConsume(ctx, 1)
				if err != nil || est.CanBeConsumed || est.Remaining != 0 {
					t.Fatalf("A's estimate after B emptied the bucket: %+v, %v; want none left", est, err)
				}
			}},
		{"another client replaces the configuration; A diagnoses", func(b *bucketgrid.Handle) error {
			c, err := core.NewConfig(core.Greedy(50, 50, time.Minute))
			if err != nil {
				return err
			}
			return b.ReplaceConfiguration(ctx, c, core.InheritAsIs)
		}, func(t *testing.T, a *bucketgrid.Handle) {
			d, err := a.Diagnose(ctx)
			if err != nil || d.State.Config.Bandwidths[0].Capacity != 50 {
				t.Fatalf("A's diagnostics after B replaced the configuration: %+v, %v; want capacity 50", d, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTwoNodes(t)
			a, b := n.handle(n.a, "k"), n.handle(n.b, "k")
			if ok, err := a.TryConsume(ctx, 4); err != nil || !ok {
				t.Fatal(ok, err)
			}
			consumeFromMemory(t, n.a, a, 4) // A remembers 2 tokens
			if err := tc.other(b); err != nil {
				t.Fatal(err)
			}
			tc.check(t, a)
		})
	}
}

// TestMemoryKeyExpires: a remembered bucket that expired in the store is
// not revived by a write from memory; it is created anew.
func TestMemoryKeyExpires(t *testing.T) {
	n := newTwoNodes(t)
	a := n.handle(n.a, "k", bucketgrid.WithExpiration(wire.Expiry{Kind: wire.ExpireFixed, Fixed: int64(time.Minute)}))
	ctx := context.Background()
	if ok, err := a.TryConsume(ctx, 9); err != nil || !ok {
		t.Fatal(ok, err)
	}
	n.clk.Advance(time.Minute) // the store's TTL passes; 10 tokens are due anyway
	p, err := a.TryConsumeAndReturnRemaining(ctx, 1)
	if err != nil || !p.Consumed || p.Remaining != 9 {
		t.Fatalf("after expiry: %+v, %v; want a new full bucket, 9 left", p, err)
	}
	if _, found := n.store.TTL("k"); !found {
		t.Fatal("the bucket was not created again")
	}
}

// TestMemoryExpiresWithTheBucket: the memory of a bucket written with a
// TTL lasts no longer than that TTL, even while the store still holds it.
func TestMemoryExpiresWithTheBucket(t *testing.T) {
	n := newTwoNodes(t)
	a := n.handle(n.a, "k", bucketgrid.WithExpiration(wire.Expiry{Kind: wire.ExpireFixed, Fixed: int64(2 * time.Second)}))
	ctx := context.Background()
	if _, err := a.TryConsume(ctx, 1); err != nil {
		t.Fatal(err)
	}
	n.clk.Advance(2 * time.Second)
	before := n.a.Stats()
	if _, err := a.TryConsume(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if s := n.a.Stats(); s.MemoryWrites != before.MemoryWrites || s.Reads == before.Reads {
		t.Fatalf("a check past the bucket's TTL was tried from memory (stats %+v)", s)
	}
}

// TestMemoryDeletedAndRecreated: A remembers a bucket; B removes it and
// creates another under the key, with other tokens. A's next write from
// memory must lose (versions are never reused), and A answers from B's
// bucket.
func TestMemoryDeletedAndRecreated(t *testing.T) {
	ctx := context.Background()
	n := newTwoNodes(t)
	a, b := n.handle(n.a, "k"), n.handle(n.b, "k")
	if _, err := a.TryConsume(ctx, 1); err != nil {
		t.Fatal(err)
	}
	consumeFromMemory(t, n.a, a, 1) // A remembers 8
	if err := bucketgrid.NewManager(n.b).RemoveBucket(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TryConsume(ctx, 9); err != nil || !ok { // B's new bucket: 1 left
		t.Fatal(ok, err)
	}
	p, err := a.TryConsumeAndReturnRemaining(ctx, 1)
	if err != nil || !p.Consumed || p.Remaining != 0 {
		t.Fatalf("A after B re-created the bucket: %+v, %v; want B's bucket, 0 left", p, err)
	}
	if ok, _ := a.TryConsume(ctx, 1); ok {
		t.Fatal("A granted a token from its memory of the deleted bucket")
	}
}

// TestMemoryOwnRemoveForgets: A's own removal forgets the key, so A's next
// request neither writes from memory nor finds the old bucket.
func TestMemoryOwnRemoveForgets(t *testing.T) {
	ctx := context.Background()
	n := newTwoNodes(t)
	a := n.handle(n.a, "k")
	if _, err := a.TryConsume(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := bucketgrid.NewManager(n.a).RemoveBucket(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	before := n.a.Stats()
	if left, err := a.AvailableTokens(ctx); err != nil || left != 10 {
		t.Fatalf("after removal: %d, %v; want a new full bucket", left, err)
	}
	if s := n.a.Stats(); s.MemoryWrites != before.MemoryWrites {
		t.Fatal("a removed key was written from memory")
	}
}

// TestMemoryClockSkew: A's clock is behind B's by 30 s. A remembers a
// drained bucket; B, ahead, drains what refilled; A's checks, from memory
// or not, must never mint the tokens B already accounted for.
func TestMemoryClockSkew(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	st := memstore.New(memstore.WithClock(clk))
	behind := clock.Func(func() int64 { return clk.Now() - int64(30*time.Second) }, true)
	cfg, _ := core.NewConfig(core.Greedy(10, 10, time.Minute)) // 1 token per 6 s
	configFn := func(context.Context) (core.Config, error) { return cfg, nil }
	ea := cas.New(st, cas.WithClock(behind))
	a := bucketgrid.NewManager(ea).Bucket("k", configFn)
	b := bucketgrid.NewManager(cas.New(st, cas.WithClock(clk))).Bucket("k", configFn)
	if n, err := a.TryConsumeAsMuchAsPossible(ctx, 100); err != nil || n != 10 {
		t.Fatal(n, err)
	}
	// B stamps 30 s later than A: 5 tokens refilled, which B takes.
	if n, err := b.TryConsumeAsMuchAsPossible(ctx, 100); err != nil || n != 5 {
		t.Fatalf("B took %d (%v), want the 5 refilled in its 30 s ahead", n, err)
	}
	for range 5 { // A, 30 s behind, walks up to B's time: nothing is due
		clk.Advance(6 * time.Second)
		if n, err := a.TryConsumeAsMuchAsPossible(ctx, 100); err != nil || n != 0 {
			t.Fatalf("A, behind, took %d tokens B had already accounted for (%v)", n, err)
		}
	}
	clk.Advance(6 * time.Second)
	if n, err := a.TryConsumeAsMuchAsPossible(ctx, 100); err != nil || n != 1 {
		t.Fatalf("A took %d (%v) once 6 s passed on its own clock beyond B's, want 1", n, err)
	}
	if s := ea.Stats(); s.MemoryWrites == 0 {
		t.Fatalf("stats %+v: the test never wrote from memory", s)
	}
}

func TestWithoutMemoryReadsEveryTime(t *testing.T) {
	n := newTwoNodes(t, cas.WithoutMemory())
	h := n.handle(n.a, "k")
	ctx := context.Background()
	for range 4 {
		if _, err := h.TryConsume(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if s := n.a.Stats(); s.MemoryWrites != 0 || s.Reads < 4 {
		t.Fatalf("stats %+v: want a read per check and no write from memory", s)
	}
}

// TestMemoryNeedsWrittenVersions: a store with only the four methods cannot
// say which version a write produced, so nothing is written from memory.
func TestMemoryNeedsWrittenVersions(t *testing.T) {
	e := cas.New(hidingStore{memstore.New()})
	h := bucketgrid.NewManager(e).Bucket("k", cfg(t))
	for range 3 {
		if _, err := h.TryConsume(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
	}
	if s := e.Stats(); s.MemoryWrites != 0 || s.Reads != 4 { // the first check: bare, then with the configuration
		t.Fatalf("stats %+v over a store without Writer or Batcher: want every check to read", s)
	}
}

// TestLostRaceWinnerAgesWithTheDelay: the winner a lost race reports is
// used at once when the strategy retries at once, and read afresh when the
// strategy waits longer than the lost write took (others write meanwhile).
func TestLostRaceWinnerAgesWithTheDelay(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		s     retry.Strategy
		reads int64
	}{
		{"retry now: the winner reported", retry.Immediate(5), 0},
		{"retry after a second: read afresh", retry.Func(func(retry.Metadata) retry.Decision {
			return retry.Decision{Action: retry.RetryAfter, Delay: time.Second}
		}), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTwoNodes(t, cas.WithRetry(tc.s)) // the fake clock sleeps at once
			a, b := n.handle(n.a, "k"), n.handle(n.b, "k")
			if _, err := a.TryConsume(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := b.TryConsume(ctx, 1); err != nil {
				t.Fatal(err)
			}
			before := n.a.Stats()
			if ok, err := a.TryConsume(ctx, 1); err != nil || !ok {
				t.Fatal(ok, err)
			}
			s := n.a.Stats()
			if d := s.MemoryConflicts - before.MemoryConflicts; d != 1 {
				t.Fatalf("%d lost races from memory, want 1", d)
			}
			if d := s.Reads - before.Reads; d != tc.reads {
				t.Errorf("%d reads after the lost race, want %d", d, tc.reads)
			}
			if left, _ := b.AvailableTokens(ctx); left != 7 {
				t.Errorf("%d tokens left, want 7", left)
			}
		})
	}
}
