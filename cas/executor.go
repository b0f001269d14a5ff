package cas

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/retry"
)

// ErrConflict is returned when the retry strategy gave up after lost races,
// or when the request's context ended while they were retried. Nothing was
// applied. The store works and the key is contended: an HTTP middleware
// should not treat it as an outage (httplimit refuses the request).
var ErrConflict = errors.New("cas: gave up after lost races")

// Executor runs core requests against a Store: read, wire.Process with the
// executor's clock, conditional write, and on a lost race whatever the retry
// strategy decides. It implements bucketgrid.Executor and is safe for
// concurrent use.
type Executor struct {
	store    Store
	strategy retry.Strategy
	clock    clock.Clock

	checkKey func(key string) error // the store's KeyChecker, if any
	writer   Writer                 // the store's Writer, if any
	batcher  Batcher                // the store's Batcher, if any
	mem      *memory                // nil: off, or the store reports no written versions
	pipe     *pipe                  // nil: no Batcher, or pipelining off

	memCfg       MemoryConfig
	noMemory     bool
	pipeCfg      PipelineConfig
	noPipelining bool

	attempts, conflicts, writes, storeErrors atomic.Int64
	requests, rounds, invalidKeys            atomic.Int64
	reads, roundTrips, batched, stalled      atomic.Int64
	memWrites, memConflicts                  atomic.Int64

	maxBatch int // operations per coalesced round; ≤ 1 disables coalescing
	queues   [queueShards]queues
}

// Option configures an Executor.
type Option func(*Executor)

// WithRetry sets the strategy consulted after each lost race; the default is
// retry.Default().
func WithRetry(s retry.Strategy) Option { return func(e *Executor) { e.strategy = s } }

// WithClock sets the clock whose readings are passed to wire.Process and to
// the strategy, and on whose terms the executor waits between retries
// (clock.Sleep: a *clock.Fake advances instead of waiting). It must read Unix
// time; the default is clock.Wall(). Clients of one store should agree on
// time: a client behind never mints tokens, one ahead by Δ can admit at most
// Δ×rate tokens early, once.
func WithClock(c clock.Clock) Option { return func(e *Executor) { e.clock = c } }

// WithoutBatching turns coalescing off: every request makes its own
// read-process-write round. Only useful to measure what coalescing saves.
func WithoutBatching() Option { return func(e *Executor) { e.maxBatch = 0 } }

// WithMemory sets the bounds of the executor's memory of buckets; the
// default is DefaultMemoryConfig().
//
// The executor remembers, per key, the value and version it last read or
// wrote, and runs the next request on the key from that memory, writing the
// result with a compare-and-swap on the remembered version: one round trip
// instead of a read and a write. Only a lost race (another process wrote)
// costs a read, or nothing more when the store reports the winning value
// with the lost race (Result.Current) — unless the retry strategy then
// waits longer than the lost write took, after which the executor reads
// afresh, as the others went on writing meanwhile. The memory never decides
// anything on its own:
//   - A write from memory is a compare-and-swap the store refuses when the
//     key was written, deleted or has expired since (the version rule of
//     Version; an expired value never comes back), so a request applied
//     from memory gets exactly the answer a fresh read would have given at
//     the moment of its write.
//   - A request whose outcome writes nothing — a rejection with no refill
//     to record, an estimate, a read of the available tokens, the
//     diagnostics or the configuration — is never answered from memory:
//     nothing would confirm it, and another process may have reset the
//     bucket, added tokens or replaced the configuration. The executor
//     reads the key first and answers from what it read.
//   - A lost race, a store error, a timeout (the outcome of a write is then
//     unknown) and Remove drop the key from memory or replace it with what
//     the store reported. What a write taught is remembered no longer than
//     the TTL it wrote, what a read taught no longer than MemoryConfig.TTL;
//     a remembered bucket that expired in the store meanwhile costs one lost
//     race (the store never lets an expired value come back), never a
//     decision.
//   - The executor's clock stamps every request as before: a remembered
//     state is the same bytes a read would return, and wire.Process never
//     mints tokens for a request dated before the stored refill time,
//     whoever's clock is behind.
//
// The memory needs the version each write produced, so it is on only for a
// store that implements Writer or Batcher. It is bounded by
// MemoryConfig.Entries and MemoryConfig.Bytes and evicts by the clock
// algorithm (keys used since the last sweep stay): under churn through more
// keys than it holds, the keys seen least recently cost a read again, as
// without memory, and nothing is held beyond the bounds. Over a store that
// does not report the winner of a lost race (Result.Current), a key whose
// writes from memory keep losing (other processes write it too) is read
// first for the next 1, 3, 7, … 31 rounds before memory is tried again, so
// it costs few wasted writes; over one that does, a lost race costs nothing
// a read would not have. Each Executor has its own memory; see
// WithoutMemory.
func WithMemory(c MemoryConfig) Option {
	return func(e *Executor) { e.memCfg, e.noMemory = c, false }
}

// WithoutMemory turns the executor's memory off (see WithMemory): every
// round reads the key first.
func WithoutMemory() Option { return func(e *Executor) { e.noMemory = true } }

// WithPipelining sets how the executor batches store operations of
// concurrent requests on different keys; the default is
// DefaultPipelineConfig(). It applies to a store that implements Batcher:
// while PipelineConfig.Flushes batches are in flight, the reads and writes
// of other rounds queue, and the queue goes as the next batch as soon as
// one returns — no operation waits for others to arrive. A coalesced round
// of requests on one key (see Execute) is one operation of such a batch.
// Every caller's own deadline still bounds its wait: an operation whose
// caller has gone while it is queued is never sent; a batch runs under a
// context that ends when every caller in it has gone. A store error on one
// operation fails that operation's round only; a batch that fails as a
// whole fails every round in it, each with ErrStore; a panic in the store
// reaches every caller of the batch, as a *PanicError, and the pipeline
// goes on.
func WithPipelining(c PipelineConfig) Option {
	return func(e *Executor) { e.pipeCfg, e.noPipelining = c, false }
}

// WithoutPipelining turns cross-key batching off (see WithPipelining): each
// store operation is a call of its own. Only useful to measure what
// pipelining saves.
func WithoutPipelining() Option { return func(e *Executor) { e.noPipelining = true } }

// New returns an executor over store. It uses the store's optional
// extensions (KeyChecker, Writer, Batcher) when the store implements them.
func New(store Store, opts ...Option) *Executor {
	e := &Executor{
		store:    store,
		strategy: retry.Default(),
		clock:    clock.Wall(),
		maxBatch: wire.MaxOps,
	}
	for _, o := range opts {
		o(e)
	}
	if kc, ok := store.(KeyChecker); ok {
		e.checkKey = kc.CheckKey
	}
	e.writer, _ = store.(Writer)
	e.batcher, _ = store.(Batcher)
	if !e.noMemory && (e.writer != nil || e.batcher != nil) {
		e.mem = newMemory(e.memCfg)
	}
	if !e.noPipelining && e.batcher != nil {
		e.pipe = newPipe(e.batcher, e.single, e.pipeCfg.withDefaults(), &e.roundTrips, &e.batched, &e.stalled)
	}
	return e
}

// Execute applies req to key's bucket. It writes only when wire.Process
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
// wire.Process for each request in arrival order on the result of the one
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
func (e *Executor) Execute(ctx context.Context, key string, req wire.Request) (wire.Response, error) {
	e.requests.Add(1)
	if err := e.check(key); err != nil {
		return wire.Response{}, err
	}
	if err := ctx.Err(); err != nil {
		return wire.Response{}, err
	}
	if err := req.Validate(); err != nil {
		_, _, resp := wire.Process(nil, req, 0) // the invalid-request answer, alone
		return resp, nil
	}
	if e.maxBatch <= 1 || !coalescing {
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
func (e *Executor) execute(ctx context.Context, key string, req wire.Request) (wire.Response, error) {
	reqs := [1]wire.Request{req}
	var resps [1]wire.Response
	err := e.run(ctx, key, reqs[:], resps[:])
	return resps[0], err
}

// run is one round: it reads key's bucket (or takes it from memory),
// applies reqs in order with wire.Process, each to the bytes the one before
// produced, at one reading of the clock, and writes the result once,
// conditionally; on a lost race it asks the strategy and starts over.
// resps[i] receives the response to reqs[i]; they are valid only when run
// returns nil.
func (e *Executor) run(ctx context.Context, key string, reqs []wire.Request, resps []wire.Response) error {
	start := e.clock.Now()
	var (
		v     value
		have  bool // v holds the key's value, read or remembered
		fresh bool // v was read from the store during this round
	)
	if e.mem != nil {
		if data, ver, ok := e.mem.get(key, start); ok {
			v, have = value{data: data, ver: ver, found: true}, true
		}
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if attempt > 1 { // ended while retrying lost races
				return conflict(key, attempt-1, err)
			}
			return err
		}
		e.attempts.Add(1)
		var (
			now     int64
			cur     []byte
			changed bool
			ttl     int64
		)
		for {
			if !have {
				op := Op{Kind: OpGet, Key: key}
				if err := e.do(ctx, &op); err != nil {
					e.forget(key)
					return e.failed(ctx, "get", key, attempt, err)
				}
				v = value{data: op.Result.Data, ver: op.Result.Ver, found: op.Result.Found}
				have, fresh = true, true
			}
			now = e.clock.Now()
			cur, changed, ttl = process(v, reqs, resps, now)
			if changed || fresh {
				break
			}
			// Nothing to write, so no compare-and-swap would confirm the
			// remembered state: read it (see WithMemory).
			have = false
		}
		if !changed {
			e.remember(key, v, now, 0)
			return nil
		}
		op := Op{Kind: OpInsert, Key: key, Data: cur, TTL: time.Duration(ttl)}
		if v.found {
			op.Kind, op.Ver = OpReplace, v.ver
		}
		if !fresh {
			e.memWrites.Add(1)
		}
		sent := time.Now()
		if err := e.do(ctx, &op); err != nil {
			e.forget(key)
			return e.failed(ctx, "write", key, attempt, err)
		}
		took := time.Since(sent)
		if op.Result.Written {
			e.writes.Add(1)
			if e.mem != nil {
				if !fresh {
					e.mem.won(key)
				}
				e.mem.put(key, cur, op.Result.Ver, now, op.TTL)
			}
			return nil
		}
		e.conflicts.Add(1)
		if !fresh {
			e.memConflicts.Add(1)
			if !op.Result.Current { // the lost write cost a round trip a read would not have
				e.mem.lost(key)
			}
		}
		if op.Result.Current {
			v = value{data: op.Result.Data, ver: op.Result.Ver, found: op.Result.Found}
			have, fresh = true, true
			e.remember(key, v, now, 0)
		} else {
			have = false
		}
		d := e.strategy.Next(retry.Metadata{Attempt: attempt, Key: key, Start: start, Now: e.clock.Now()})
		switch d.Action {
		case retry.RetryNow:
		case retry.RetryAfter:
			if dl, has := ctx.Deadline(); has && time.Until(dl) < d.Delay {
				// The deadline wins: the retry would start past it.
				return conflict(key, attempt, context.DeadlineExceeded)
			}
			if err := sleep(ctx, e.clock, d.Delay); err != nil {
				return conflict(key, attempt, err)
			}
			if d.Delay > took {
				// The winner a lost race reported has aged by the delay,
				// longer than a read would take to come back, while the
				// others went on writing: read afresh.
				have = false
			}
		default:
			return conflict(key, attempt, nil)
		}
	}
}

// value is a key's stored value as a read reports it.
type value struct {
	data  []byte
	ver   Version
	found bool
}

// process applies reqs in order to v's bytes at now, each to the bytes the
// one before produced, filling resps. It returns the bytes to write, whether
// any request changed the bucket, and the TTL of the last change.
func process(v value, reqs []wire.Request, resps []wire.Response, now int64) (cur []byte, changed bool, ttl int64) {
	if v.found {
		cur = v.data
	}
	for i := range reqs {
		next, ch, resp := wire.Process(cur, reqs[i], now)
		resps[i] = resp
		if ch {
			cur, changed, ttl = next, true, resp.TTL
		}
	}
	return cur, changed, ttl
}

// remember records v as key's value in memory, or forgets key when v is
// absent.
func (e *Executor) remember(key string, v value, now int64, ttl time.Duration) {
	switch {
	case e.mem == nil:
	case v.found:
		e.mem.put(key, v.data, v.ver, now, ttl)
	default:
		e.mem.forget(key)
	}
}

// forget drops key from memory, after an error (a write's outcome may be
// unknown) or a removal.
func (e *Executor) forget(key string) {
	if e.mem != nil {
		e.mem.forget(key)
	}
}

// do performs op — in a shared batch when pipelining, alone otherwise —
// and returns its error. It counts the read and the round trip.
func (e *Executor) do(ctx context.Context, op *Op) error {
	if op.Kind == OpGet {
		e.reads.Add(1)
	}
	if e.pipe != nil {
		return e.pipe.do(ctx, op)
	}
	e.roundTrips.Add(1)
	return e.single(ctx, op)
}

// single performs op alone through the cheapest call the store offers for
// it: Get, Write, a batch of one, Insert or Replace.
func (e *Executor) single(ctx context.Context, op *Op) error {
	var err error
	r := &op.Result
	switch {
	case op.Kind == OpGet:
		r.Data, r.Ver, r.Found, err = e.store.Get(ctx, op.Key)
	case e.writer != nil:
		err = e.writer.Write(ctx, op)
	case e.batcher != nil:
		ops := [1]*Op{op}
		if err = e.batcher.Batch(ctx, ops[:]); err == nil {
			err = op.Result.Err
		}
	case op.Kind == OpInsert:
		r.Written, err = e.store.Insert(ctx, op.Key, op.Data, op.TTL)
	default:
		r.Written, err = e.store.Replace(ctx, op.Key, op.Data, op.Ver, op.TTL)
	}
	return err
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
	e.forget(key)
	e.roundTrips.Add(1)
	err := e.store.Delete(ctx, key)
	e.forget(key) // a round that ran meanwhile may have remembered it
	if err != nil {
		return e.storeErr("delete", key, err)
	}
	return nil
}

// Stats counts what an executor did since it was created.
type Stats struct {
	Requests    int64 // calls to Execute
	Rounds      int64 // rounds run (each one or more requests)
	Attempts    int64 // process-and-write attempts (a round makes one, and one more per lost race)
	Conflicts   int64 // lost races
	Writes      int64 // successful writes
	StoreErrors int64 // failures returned from the store
	InvalidKeys int64 // keys refused as the store cannot hold them (not store failures)

	Reads           int64 // reads sent to the store
	RoundTrips      int64 // calls to the store; a batch of many operations counts once
	Batched         int64 // operations sent in batches shared with other rounds (see WithPipelining)
	MemoryWrites    int64 // writes tried from memory, without a read (see WithMemory)
	MemoryConflicts int64 // of those, lost races
	Stalled         int64 // batches still in flight after PipelineConfig.StallAfter, which let the next go
}

// Outage reports whether err, returned by Execute, may be an outage of the
// store, rather than a key too contended to update (ErrConflict): the
// optional method of a bucketgrid.Executor a Manager's degraded mode asks, so that a hot
// key is refused as it is without degrade, never decided locally.
func (e *Executor) Outage(err error) bool { return !errors.Is(err, ErrConflict) }

// Stats returns the counters.
func (e *Executor) Stats() Stats {
	return Stats{Requests: e.requests.Load(), Rounds: e.rounds.Load(), Attempts: e.attempts.Load(), Conflicts: e.conflicts.Load(),
		Writes: e.writes.Load(), StoreErrors: e.storeErrors.Load(), InvalidKeys: e.invalidKeys.Load(),
		Reads: e.reads.Load(), RoundTrips: e.roundTrips.Load(), Batched: e.batched.Load(),
		MemoryWrites: e.memWrites.Load(), MemoryConflicts: e.memConflicts.Load(), Stalled: e.stalled.Load()}
}
