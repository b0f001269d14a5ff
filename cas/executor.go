package cas

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/retry"
)

// ErrConflict is returned when the retry strategy gave up after lost races.
// Nothing was applied.
var ErrConflict = errors.New("cas: gave up after lost races")

// Executor runs core requests against a Store: read, core.Process with the
// executor's clock, conditional write, and on a lost race whatever the retry
// strategy decides. It implements bucketgrid.Executor and is safe for
// concurrent use.
type Executor struct {
	store    Store
	strategy retry.Strategy
	clock    clock.Clock

	attempts, conflicts, writes, storeErrors atomic.Int64
	requests, rounds                         atomic.Int64

	maxBatch int // operations per coalesced round; ≤ 1 disables coalescing
	mu       sync.Mutex
	queues   map[string]*queue // guarded by mu
}

// Option configures an Executor.
type Option func(*Executor)

// WithRetry sets the strategy consulted after each lost race; the default is
// retry.Default().
func WithRetry(s retry.Strategy) Option { return func(e *Executor) { e.strategy = s } }

// WithClock sets the clock whose readings are passed to core.Process and to
// the strategy, and on whose terms the executor waits between retries
// (clock.Sleep: a *clock.Fake advances instead of waiting). It must read Unix
// time; the default is clock.Wall(). Clients of one store should agree on
// time: a client behind never mints tokens, one ahead by Δ can admit at most
// Δ×rate tokens early, once.
func WithClock(c clock.Clock) Option { return func(e *Executor) { e.clock = c } }

// WithoutBatching turns coalescing off: every request makes its own
// read-process-write round. Only useful to measure what coalescing saves.
func WithoutBatching() Option { return func(e *Executor) { e.maxBatch = 0 } }

// New returns an executor over store.
func New(store Store, opts ...Option) *Executor {
	e := &Executor{
		store:    store,
		strategy: retry.Default(),
		clock:    clock.Wall(),
		maxBatch: core.MaxOps,
		queues:   make(map[string]*queue),
	}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Execute applies req to key's bucket. It writes only when core.Process
// reports a change. A store failure is returned wrapped in ErrStore and is
// never retried: after a failed write the outcome is unknown, and the caller
// (fail-open or fail-closed) decides. Lost races are retried per strategy;
// giving up returns ErrConflict; the context ending returns its error.
//
// Concurrent requests for one key in this process are coalesced: while one
// read-process-write round is in flight, the requests that arrive queue up
// and go together in the next round, as one batch that core.Process applies
// in arrival order. A hot key then costs one compare-and-swap per round, not
// one per request, and lost races between this process's own callers
// disappear. See WithoutBatching.
func (e *Executor) Execute(ctx context.Context, key string, req core.Request) (core.Response, error) {
	e.requests.Add(1)
	if err := ctx.Err(); err != nil {
		return core.Response{}, err
	}
	if err := req.Validate(); err != nil {
		_, _, resp := core.Process(nil, req, 0) // the invalid-request answer, alone
		return resp, nil
	}
	if e.maxBatch <= 1 {
		return e.execute(ctx, key, req)
	}
	return e.coalesce(ctx, key, req)
}

// execute runs one request: read, process, conditional write, retry.
func (e *Executor) execute(ctx context.Context, key string, req core.Request) (core.Response, error) {
	start := e.clock.Now()
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return core.Response{}, err
		}
		e.attempts.Add(1)
		data, ver, found, err := e.store.Get(ctx, key)
		if err != nil {
			return core.Response{}, e.storeErr("get", key, err)
		}
		if !found {
			data = nil
		}
		newData, changed, resp := core.Process(data, req, e.clock.Now())
		if !changed {
			return resp, nil
		}
		ttl := time.Duration(resp.TTL)
		var ok bool
		if found {
			ok, err = e.store.Replace(ctx, key, newData, ver, ttl)
		} else {
			ok, err = e.store.Insert(ctx, key, newData, ttl)
		}
		if err != nil {
			return core.Response{}, e.storeErr("write", key, err)
		}
		if ok {
			e.writes.Add(1)
			return resp, nil
		}
		e.conflicts.Add(1)
		d := e.strategy.Next(retry.Metadata{Attempt: attempt, Key: key, Start: start, Now: e.clock.Now()})
		switch d.Action {
		case retry.RetryNow:
		case retry.RetryAfter:
			if dl, has := ctx.Deadline(); has && time.Until(dl) < d.Delay {
				<-ctx.Done() // the deadline wins: waiting is all that is left
				return core.Response{}, ctx.Err()
			}
			if err := clock.Sleep(ctx, e.clock, d.Delay); err != nil {
				return core.Response{}, err
			}
		default:
			return core.Response{}, fmt.Errorf("%w: key %s, %d attempts", ErrConflict, core.RedactKey(key), attempt)
		}
	}
}

func (e *Executor) storeErr(op, key string, err error) error {
	e.storeErrors.Add(1)
	return fmt.Errorf("%w: %s %s: %w", ErrStore, op, core.RedactKey(key), err)
}

// Remove deletes key's bucket.
func (e *Executor) Remove(ctx context.Context, key string) error {
	if err := e.store.Delete(ctx, key); err != nil {
		return e.storeErr("delete", key, err)
	}
	return nil
}

// Stats counts what an executor did since it was created.
type Stats struct {
	Requests    int64 // calls to Execute
	Rounds      int64 // coalesced batches sent (each one or more requests)
	Attempts    int64 // read-process-write rounds
	Conflicts   int64 // lost races
	Writes      int64 // successful writes
	StoreErrors int64 // failures returned from the store
}

// Stats returns the counters.
func (e *Executor) Stats() Stats {
	return Stats{Requests: e.requests.Load(), Rounds: e.rounds.Load(), Attempts: e.attempts.Load(), Conflicts: e.conflicts.Load(),
		Writes: e.writes.Load(), StoreErrors: e.storeErrors.Load()}
}
