package tck

import (
	"context"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// A cas.Executor over a store that reports the versions it writes
// remembers each bucket (cas.WithMemory) and writes the next request on it
// without a read. The checks below put such an executor, A, beside another
// client, B, that changes the bucket behind A's back, and require A to see
// every change: through the lost race of its write from memory, or through
// the read it makes before any answer that writes nothing. Over a store
// without the extensions they check the executor's ordinary reads.

// memoryPair is A and B on one key of the store under test.
type memoryPair struct {
	e      *env
	ea     *cas.Executor
	a, b   *bucketgrid.Handle
	key    string
	bm     *bucketgrid.Manager
	config func(context.Context) (core.Config, error)
}

func newMemoryPair(e *env, name string, opts ...bucketgrid.ManagerOption) *memoryPair {
	p := &memoryPair{e: e, config: staticConfig(core.Greedy(10, 10, time.Hour))}
	p.ea = cas.New(e.store, cas.WithClock(e.now()), cas.WithRetry(kitRetry()))
	p.bm = bucketgrid.NewManager(cas.New(e.store, cas.WithClock(e.now()), cas.WithRetry(kitRetry())), opts...)
	key := e.key(name)
	p.key = key
	p.a = bucketgrid.NewManager(p.ea, opts...).Bucket(key, p.config)
	p.b = p.bm.Bucket(key, p.config)
	return p
}

func (p *memoryPair) must(what string, err error) {
	if err != nil {
		p.e.Fatalf("%s: %v", what, err)
	}
}

// consume has A consume n and fails unless the answer is want.
func (p *memoryPair) consume(n int64, want bool, after string) {
	ok, err := p.a.TryConsume(p.e.ctx, n)
	p.must("A's TryConsume", err)
	if ok != want {
		p.e.Errorf("after %s, A's TryConsume(%d) answered %v, want %v: A decided from a remembered bucket that another client had changed. A write from memory must lose when the key changed (the version rule), and an answer that writes nothing must come from a read", after, n, ok, want)
	}
}

// available has A read the tokens and fails unless there are want.
func (p *memoryPair) available(want int64, after string) {
	n, err := p.a.AvailableTokens(p.e.ctx)
	p.must("A's AvailableTokens", err)
	if n != want {
		p.e.Errorf("after %s, A reads %d tokens, want %d: A answered a read from its memory of the bucket instead of the store", after, n, want)
	}
}

// drain has A consume all but left of a full bucket of 10, the second part
// from memory when the store allows.
func (p *memoryPair) drain(left int64) {
	p.consume(1, true, "creating the bucket")
	p.consume(9-left, true, "its first write")
}

// checkMemoryNeverDecides: B consumes, adds tokens, resets, replaces the
// configuration, removes and re-creates the bucket; A sees each.
func checkMemoryNeverDecides(e *env) {
	ctx := e.ctx
	p := newMemoryPair(e, "memory")
	p.drain(2)
	_, err := p.b.TryConsume(ctx, 2)
	p.must("B's TryConsume", err)
	p.consume(1, false, "B consumed the last 2 tokens")
	p.must("B's AddTokens", p.b.AddTokens(ctx, 5))
	p.consume(5, true, "B added 5 tokens to an empty bucket") // a refusal from memory would be wrong
	p.available(0, "A consumed the 5 B added")
	p.must("B's Reset", p.b.Reset(ctx))
	p.available(10, "B reset the bucket")
	p.consume(4, true, "B reset the bucket")
	est, err := p.a.EstimateAbilityToConsume(ctx, 6)
	p.must("A's estimate", err)
	if !est.CanBeConsumed || est.Remaining != 6 {
		e.Errorf("A's estimate of 6 with 6 left answered %+v", est)
	}
	cfg, err := core.NewConfig(core.Greedy(50, 50, time.Hour))
	p.must("NewConfig", err)
	p.must("B's ReplaceConfiguration", p.b.ReplaceConfiguration(ctx, cfg, core.InheritAsIs))
	d, err := p.a.Diagnose(ctx)
	p.must("A's Diagnose", err)
	if c := d.State.Config.Bandwidths[0].Capacity; c != 50 {
		e.Errorf("after B replaced the configuration (capacity 50), A's diagnostics show capacity %d: answered from memory", c)
	}
	if e.cfg.noDelete == "" {
		p.must("B's RemoveBucket", p.bm.RemoveBucket(ctx, p.key))
		_, err = p.b.TryConsume(ctx, 9) // B's new bucket: 1 token left
		p.must("B's TryConsume", err)
		p.consume(1, true, "B removed the bucket and created another with 1 token left")
		p.consume(1, false, "B removed the bucket and created another with 1 token left, which A took")
	}
	s := p.ea.Stats()
	e.Logf("A wrote %d times from memory, %d of them lost races", s.MemoryWrites, s.MemoryConflicts)
	if _, ok := e.store.(cas.Writer); ok && s.MemoryWrites == 0 {
		e.Errorf("the store implements cas.Writer, but A never wrote from memory")
	}
}

// checkMemoryAfterExpiry: A writes a bucket with a TTL and remembers it;
// once the store has expired it, A's next check must not bring it back
// from memory but create it anew.
func checkMemoryAfterExpiry(e *env) {
	ttl := newTTLPlan(e.cfg.ttl).long
	p := newMemoryPair(e, "memory-expiry", bucketgrid.WithExpiration(wire.Expiry{Kind: wire.ExpireFixed, Fixed: int64(ttl)}))
	p.drain(1)
	deadline := time.Now().Add(5*ttl + 3*time.Second)
	for {
		_, _, found, err := p.bm.Configuration(e.ctx, p.key)
		p.must("B's Configuration", err)
		if !found {
			break
		}
		if time.Now().After(deadline) {
			e.Fatalf("a bucket written with a %v TTL still exists after %v", ttl, 5*ttl+3*time.Second)
		}
		time.Sleep(ttl / 4)
	}
	probe, err := p.a.TryConsumeAndReturnRemaining(e.ctx, 1)
	p.must("A's TryConsumeAndReturnRemaining", err)
	if !probe.Consumed || probe.Remaining != 9 {
		e.Errorf("after the bucket expired, A's check of 1 left %d tokens (consumed %v), want a new full bucket with 9 left: a write from memory brought the expired bucket back", probe.Remaining, probe.Consumed)
	}
}
