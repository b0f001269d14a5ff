package cas

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/retry"
)

// ErrConflict is returned when the retry strategy gave up after lost races,
// or when the request's context ended while they were retried. Nothing was
// applied. The store works and the key is contended: an HTTP middleware
// should not treat it as an outage (httplimit refuses the request).
var ErrConflict = errors.New("cas: gave up after lost races")

// Executor runs core requests against a Store: read, core.Process with the
// executor's clock, conditional write, and on a lost race whatever the retry
// strategy decides. It implements bucketgrid.Executor and is safe for
// concurrent use.
type Executor struct {
	store    Store
	strategy retry.Strategy
	clock    clock.Clock

	checkKey func(key string) error // the store's KeyChecker, if any

	attempts, conflicts, writes, storeErrors atomic.Int64
	requests, rounds, invalidKeys            atomic.Int64

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
	if kc, ok := store.(KeyChecker); ok {
		e.checkKey = kc.CheckKey
	}
	return e
}

// Execute applies req to key's bucket. It writes only when core.Process
// reports a change. A key the store cannot hold (see KeyChecker) is refused
// first, with the store's error wrapping core.ErrInvalidKey, before anything
// is queued, read or written. A store failure is returned wrapped in ErrStore
// and is never retried: after a failed write the outcome is unknown, and the
// caller (fail-open or fail-closed) decides. Lost races are retried per
// strategy; giving up returns ErrConflict, and so does ctx ending while
// lost races are retried (the error then wraps ctx's error too, or
// context.DeadlineExceeded when the next retry would start past the
// deadline, which ends the retries at once); ctx ending otherwise returns
// its error.
//
// Concurrent requests for one key in this process are coalesced: while one
// read-process-write round is in flight, the requests that arrive queue up
// and go together in the next round, which reads the bucket once, runs
// core.Process for each request in arrival order on the result of the one
// before, and writes once. Each request gets the response of its own step,
// diagnostics included, exactly as if it had run alone at that point; a hot
// key costs one compare-and-swap per round, not one per request, and lost
// races between this process's own callers disappear. Every caller's own
// context bounds its wait, whether or not it leads a round: a round that
// holds several requests runs on a goroutine of its own, so a caller whose
// context ends returns at once (its request's outcome is then unknown, as
// after any timeout) while the others' round goes on. See WithoutBatching.
//
// A panic in the store (or anywhere in a round) never leaves the key stuck:
// the next queued request takes over the key. A round run on the caller's
// goroutine panics there as usual; a round run on a goroutine of its own is
// recovered, and every caller still waiting for that round panics on its own
// goroutine with a *PanicError holding the value and the stack.
func (e *Executor) Execute(ctx context.Context, key string, req core.Request) (core.Response, error) {
	e.requests.Add(1)
	if err := e.check(key); err != nil {
		return core.Response{}, err
	}
	if err := ctx.Err(); err != nil {
		return core.Response{}, err
	}
	if err := req.Validate(); err != nil {
		_, _, resp := core.Process(nil, req, 0) // the invalid-request answer, alone
		return resp, nil
	}
	if e.maxBatch <= 1 {
		e.rounds.Add(1)
		return e.execute(ctx, key, req)
	}
	return e.coalesce(ctx, key, req)
}

// check runs the store's KeyChecker, if any.
func (e *Executor) check(key string) error {
	if e.checkKey == nil {
		return nil
	}
	if err := e.checkKey(key); err != nil {
		e.invalidKeys.Add(1)
		return err
	}
	return nil
}

// execute runs one request in a round of its own.
func (e *Executor) execute(ctx context.Context, key string, req core.Request) (core.Response, error) {
	reqs := [1]core.Request{req}
	var resps [1]core.Response
	err := e.run(ctx, key, reqs[:], resps[:])
	return resps[0], err
}

// run is one round: it reads key's bucket, applies reqs in order with
// core.Process, each to the bytes the one before produced, at one reading of
// the clock, and writes the result once, conditionally; on a lost race it
// asks the strategy and starts over. resps[i] receives the response to
// reqs[i]; they are valid only when run returns nil.
func (e *Executor) run(ctx context.Context, key string, reqs []core.Request, resps []core.Response) error {
	start := e.clock.Now()
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if attempt > 1 { // ended while retrying lost races
				return conflict(key, attempt-1, err)
			}
			return err
		}
		e.attempts.Add(1)
		data, ver, found, err := e.store.Get(ctx, key)
		if err != nil {
			return e.failed(ctx, "get", key, attempt, err)
		}
		if !found {
			data = nil
		}
		now := e.clock.Now()
		cur, changed, ttl := data, false, int64(0)
		for i := range reqs {
			next, ch, resp := core.Process(cur, reqs[i], now)
			resps[i] = resp
			if ch {
				cur, changed, ttl = next, true, resp.TTL
			}
		}
		if !changed {
			return nil
		}
		var ok bool
		if found {
			ok, err = e.store.Replace(ctx, key, cur, ver, time.Duration(ttl))
		} else {
			ok, err = e.store.Insert(ctx, key, cur, time.Duration(ttl))
		}
		if err != nil {
			return e.failed(ctx, "write", key, attempt, err)
		}
		if ok {
			e.writes.Add(1)
			return nil
		}
		e.conflicts.Add(1)
		d := e.strategy.Next(retry.Metadata{Attempt: attempt, Key: key, Start: start, Now: e.clock.Now()})
		switch d.Action {
		case retry.RetryNow:
		case retry.RetryAfter:
			if dl, has := ctx.Deadline(); has && time.Until(dl) < d.Delay {
				// The deadline wins: the retry would start past it.
				return conflict(key, attempt, context.DeadlineExceeded)
			}
			if err := clock.Sleep(ctx, e.clock, d.Delay); err != nil {
				return conflict(key, attempt, err)
			}
		default:
			return conflict(key, attempt, nil)
		}
	}
}

// conflict returns ErrConflict for key after attempts lost races, wrapping
// cause (the context's error) when the context ended the retries.
func conflict(key string, attempts int, cause error) error {
	detail := ": key " + core.RedactKey(key) + ", " + strconv.Itoa(attempts) + " attempts"
	if cause == nil {
		return wrap(ErrConflict, detail)
	}
	return wrap2(ErrConflict, detail+": ", cause)
}

// failed returns the error of a store call of attempt that failed with err:
// ErrConflict when ctx ended while lost races were retried (the deadline
// cut the retries short, the store is not to blame), otherwise the store's
// failure.
func (e *Executor) failed(ctx context.Context, op, key string, attempt int, err error) error {
	if cerr := ctx.Err(); cerr != nil && attempt > 1 {
		return conflict(key, attempt-1, cerr)
	}
	return e.storeErr(op, key, err)
}

// storeErr wraps a store failure in ErrStore and counts it. An invalid key
// is the client's error and passes through as it is.
func (e *Executor) storeErr(op, key string, err error) error {
	if errors.Is(err, core.ErrInvalidKey) {
		e.invalidKeys.Add(1)
		return err
	}
	e.storeErrors.Add(1)
	return wrap2(ErrStore, ": "+op+" "+core.RedactKey(key)+": ", err)
}

// Remove deletes key's bucket. A key the store cannot hold is refused as by
// Execute.
func (e *Executor) Remove(ctx context.Context, key string) error {
	if err := e.check(key); err != nil {
		return err
	}
	if err := e.store.Delete(ctx, key); err != nil {
		return e.storeErr("delete", key, err)
	}
	return nil
}

// Stats counts what an executor did since it was created.
type Stats struct {
	Requests    int64 // calls to Execute
	Rounds      int64 // rounds run (each one or more requests)
	Attempts    int64 // read-process-write rounds
	Conflicts   int64 // lost races
	Writes      int64 // successful writes
	StoreErrors int64 // failures returned from the store
	InvalidKeys int64 // keys refused as the store cannot hold them (not store failures)
}

// Stats returns the counters.
func (e *Executor) Stats() Stats {
	return Stats{Requests: e.requests.Load(), Rounds: e.rounds.Load(), Attempts: e.attempts.Load(), Conflicts: e.conflicts.Load(),
		Writes: e.writes.Load(), StoreErrors: e.storeErrors.Load(), InvalidKeys: e.invalidKeys.Load()}
}
