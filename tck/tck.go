// Package tck is bucketgrid's compatibility test kit: one call runs every
// semantic and atomicity check against a backend, with a fake clock and
// fault injection.
//
//	func TestMyStore(t *testing.T) {
//		tck.RunStore(t, func(t *testing.T) cas.Store { return mystore.New(...) })
//	}
//
// Run it with -race: the kit calls the store from many goroutines, and a
// store that shares a buffer, a map or a counter between calls without a
// lock can pass every check by luck, where the race detector fails it.
//
// RunStore checks a cas.Store against the cas.Store contract, the version
// rule first (see cas.Version), then: lost races are not errors and errors
// are not lost races; distinct keys are distinct entries and a key the
// store cannot hold is refused with core.ErrInvalidKey; Delete removes one
// key; who owns the bytes; a live key is never reported absent; TTLs are
// never early and never far late, on every write and over 30 days; an
// expired version loses; a store-level atomicity probe; injected
// conflicts, stale reads, outages and timeouts; clock skew between
// clients; an executor that remembers buckets (cas.WithMemory) beside
// another client that changes them — consumes, adds tokens, resets,
// replaces the configuration, deletes and re-creates, lets expire — must
// see every change. Then it runs everything Run checks, through cas
// executors that share the store as separate nodes would.
//
// A store's optional extensions face the same rules. For each one the
// store implements, RunStore runs the store checks again on the store seen
// through it (named "Writer/StoreContract", "Batcher/StoreAtomicityProbe",
// …), and the checks only an extension has: that a write reports the
// version Get returns next and a lost race the value that won
// (WriteReports), that each operation of a batch gets its own outcome and
// a failure of its own (BatchOperations), and an atomicity probe through
// concurrent multi-key batches. The kit's executors, fault injectors
// included, use the extensions as a production executor would: memory and
// pipelining on.
//
// Run checks any bucketgrid.Executor (an entry-processor grid, say): results
// equal to the pure model on scripted sequences, a single initialisation
// under racing creators, exact accounting under contention across nodes,
// two-sided rate bounds, a linearizability check of concurrent histories
// (porcupine), recovery, implicit configuration replacement races,
// expiration and removal.
//
// Time: bucket time is faked and advanced by the checks, so rates are
// checked exactly, in both directions, without sleeping. TTLs cannot be
// faked — a store expires values on its own clock — so the TTL checks wait
// in real time, a few seconds at most, and judge with bounds that a loaded
// machine can only weaken. RunStore starts the checks that mostly wait
// before the others and reports them last. Every check is bounded in real
// time as well as in fake time: a store whose writes always lose fails in
// seconds, not minutes.
//
// The kit is itself tested: its own tests run it against a broken store for
// each way real stores go wrong and assert that each is caught by the
// check named, with a message a backend author can act on, and that correct
// stores — one whose versions are digests of the value among them — pass.
package tck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/retry"
)

// ExecutorFactory returns one or more executors that share one storage, as
// the nodes of a cluster would; the kit spreads calls over all of them. Every
// executor must take bucket time from c, a wall clock (Unix nanoseconds) that
// the kit fakes and advances itself; c is not a clock.Sleeper, so waits on it
// take real time. Use t.Cleanup to release resources.
type ExecutorFactory func(t *testing.T, c clock.Clock) []bucketgrid.Executor

// StoreFactory returns a store to check. Stores from one factory may share
// data: the kit uses keys unique to each check. RunStore runs some checks
// at the same time, each on a store of its own from the factory, so a
// store's cleanup must release only what that store made (delete its own
// keys, not a prefix every store shares).
type StoreFactory func(t *testing.T) cas.Store

// Option adjusts the kit to a backend.
type Option func(*config)

type config struct {
	goroutines, perGoroutine int           // contention
	probeWorkers, probeEach  int           // store atomicity probe
	ttl                      time.Duration // the store's expiry resolution
	noTTL                    string        // reason the store has no TTL
	noDelete                 string        // reason the store cannot delete
	maxKeyLen                int           // the store's documented maximum key length; 0: none declared
	nodes                    int           // executors per store in RunStore
}

func newConfig(opts []Option) *config {
	c := &config{goroutines: 8, perGoroutine: 500, probeWorkers: 4, probeEach: 500,
		ttl: 20 * time.Millisecond, nodes: 3}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithContention sets the contention checks' size: goroutines×perGoroutine
// consumptions on one key (default 8×500). Lower it for slow servers.
func WithContention(goroutines, perGoroutine int) Option {
	return func(c *config) { c.goroutines, c.perGoroutine = goroutines, perGoroutine }
}

// WithProbe sets the store atomicity probe's size (default 4 workers × 500
// increments).
func WithProbe(workers, each int) Option {
	return func(c *config) { c.probeWorkers, c.probeEach = workers, each }
}

// WithTTLResolution declares the store's expiry resolution d (default
// 20 ms): a value may vanish up to d before or after its TTL has passed,
// and no more. Stores that round TTLs up to whole milliseconds need no
// option; Couchbase, which counts whole seconds, needs 1 s. The TTL checks
// wait in real time for TTLs of max(1 s, 3d), so a coarse resolution makes
// them slower, never weaker than the store can be.
func WithTTLResolution(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithoutTTL declares that the store cannot expire entries, with the reason;
// the TTL and expiration checks are reported as skipped, not passed.
func WithoutTTL(reason string) Option { return func(c *config) { c.noTTL = reason } }

// WithoutDelete declares that the store cannot delete entries, with the
// reason; the removal and recovery checks are reported as skipped.
func WithoutDelete(reason string) Option { return func(c *config) { c.noDelete = reason } }

// WithMaxKeyLen declares the store's documented maximum key length n, in
// bytes, as the kit's keys reach the store (after nothing: a store that adds
// a prefix of its own declares its limit minus the prefix). The key checks
// then require every key of up to n bytes to be a bucket of its own and
// every longer key to be refused, by each method, with an error wrapping
// core.ErrInvalidKey (core.InvalidKey). Without it the kit accepts either
// outcome for long keys — held exactly, or refused that way — and still
// fails a store that truncates or merges them.
func WithMaxKeyLen(n int) Option { return func(c *config) { c.maxKeyLen = n } }

// env is what a check gets.
type env struct {
	t     *testing.T
	cfg   *config
	clock *clock.Fake
	run   string // unique per check run, prefixes keys
	ctx   context.Context

	mu       sync.Mutex
	failures []string
	notes    []string // logged, not failures: what a check measured

	// exactly one of these is set
	execs []bucketgrid.Executor
	store cas.Store
}

// failNow aborts a check from its own goroutine.
type failNow struct{}

// Errorf records a failure; safe from any goroutine.
func (e *env) Errorf(format string, args ...any) {
	e.mu.Lock()
	e.failures = append(e.failures, fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

// Fatalf records a failure and ends the check; only from the check's own
// goroutine.
func (e *env) Fatalf(format string, args ...any) {
	e.Errorf(format, args...)
	panic(failNow{})
}

// Logf records a note that the check's report logs; safe from any
// goroutine.
func (e *env) Logf(format string, args ...any) {
	e.mu.Lock()
	e.notes = append(e.notes, fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

// now returns the kit's fake time as a clock that is not a clock.Sleeper:
// executors read bucket time from it, but their waits between retries take
// real time and never move the fake clock, which only the checks advance.
func (e *env) now() clock.Clock { return clock.Func(e.clock.Now, true) }

// key returns a key unique to this check run.
func (e *env) key(name string) string { return "tck-" + e.run + "-" + name }

type check struct {
	name string
	// needs lists what the check needs of a store: "ttl", "delete"
	needs string
	// background marks a check that spends its time waiting in real time
	// (for TTLs) or on round trips of its own: the runner starts it before
	// the other checks and reports it after them, so the waits overlap.
	background bool
	run        func(e *env)
}

func runID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// start is the fake time checks begin at.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// checkTimeout bounds every check in real time, whatever the store does: a
// check that has not finished by then fails with the context's error.
const checkTimeout = time.Minute

// result is what a check run produced.
type result struct {
	failures, notes []string
	skip            string
	took            time.Duration
}

// skipReason returns why the backend cannot run c, or "".
func skipReason(cfg *config, c check) string {
	switch {
	case strings.Contains(c.needs, "ttl") && cfg.noTTL != "":
		return "store has no TTL: " + cfg.noTTL
	case strings.Contains(c.needs, "delete") && cfg.noDelete != "":
		return "store cannot delete: " + cfg.noDelete
	}
	return ""
}

// prepare makes a check's env and runs setup on the calling goroutine (a
// factory may call t.Fatal); it returns a function that runs the check and
// its result, for the caller to run on any goroutine.
func prepare(t *testing.T, cfg *config, c check, setup func(e *env)) func() result {
	if skip := skipReason(cfg, c); skip != "" {
		return func() result { return result{skip: skip} }
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	e := &env{t: t, cfg: cfg, clock: clock.NewFake(start), run: runID(), ctx: ctx}
	ready := guard(e, func() { setup(e) })
	return func() result {
		defer cancel()
		began := time.Now()
		if ready {
			guard(e, func() { c.run(e) })
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		return result{failures: e.failures, notes: e.notes, took: time.Since(began)}
	}
}

// guard runs f, turning a Fatalf or a panic into a recorded failure; it
// reports whether f returned normally.
func guard(e *env, f func()) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			if _, isFail := r.(failNow); !isFail {
				e.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}
	}()
	f()
	return true
}

// runCheck runs one check and returns its failures; a skip reason is
// returned when the backend declared it cannot support the check.
func runCheck(t *testing.T, cfg *config, c check, setup func(e *env)) (failures []string, skip string) {
	r := prepare(t, cfg, c, setup)()
	return r.failures, r.skip
}

func report(t *testing.T, r result) {
	t.Helper()
	for _, n := range r.notes {
		t.Log(n)
	}
	if r.skip != "" {
		t.Skip(r.skip)
	}
	for _, f := range r.failures {
		t.Error(f)
	}
}

// planned is a check with the setup that gives it its store or executors.
type planned struct {
	check
	setup func(t *testing.T, e *env)
}

// runAll runs the plan: background checks start first, each on its own
// goroutine, foreground checks run one at a time as subtests, and the
// background checks are reported last, as subtests that wait for them.
func runAll(t *testing.T, cfg *config, plan []planned) {
	t.Helper()
	pending := map[string]chan result{}
	for _, p := range plan {
		if !p.background {
			continue
		}
		run := prepare(t, cfg, p.check, func(e *env) { p.setup(t, e) })
		done := make(chan result, 1)
		pending[p.name] = done
		go func() { done <- run() }()
	}
	for _, p := range plan {
		if p.background {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			report(t, prepare(t, cfg, p.check, func(e *env) { p.setup(t, e) })())
		})
	}
	for _, p := range plan {
		if done := pending[p.name]; done != nil {
			t.Run(p.name, func(t *testing.T) {
				r := <-done
				t.Logf("ran for %v, alongside the checks above", r.took.Round(time.Millisecond))
				report(t, r)
			})
		}
	}
}

// Run checks executors from newExecutors. See the package documentation.
func Run(t *testing.T, newExecutors ExecutorFactory, opts ...Option) {
	t.Helper()
	runAll(t, newConfig(opts), executorPlan(newExecutors))
}

func executorPlan(newExecutors ExecutorFactory) []planned {
	var plan []planned
	for _, c := range executorChecks {
		plan = append(plan, planned{c, func(t *testing.T, e *env) {
			e.execs = newExecutors(t, e.now())
			if len(e.execs) == 0 {
				e.Fatalf("the ExecutorFactory returned no executor")
			}
		}})
	}
	return plan
}

// RunStore checks stores from newStore: the store contract and fault
// handling, then every Run check through cas executors sharing one store.
// Run it with -race: the kit calls the store from many goroutines, and a
// store that shares a buffer, a map or a counter between calls without a
// lock may pass every check by luck, where the race detector fails it.
func RunStore(t *testing.T, newStore StoreFactory, opts ...Option) {
	t.Helper()
	cfg := newConfig(opts)
	var plan []planned
	checks := storeChecks
	if has := offered(newStore(t)); len(has) > 0 {
		t.Logf("the store implements cas.%s: its checks run through each as well", strings.Join(has, " and cas."))
		for _, c := range extensionChecks() {
			name, _, _ := strings.Cut(c.name, "/")
			if slices.Contains(has, name) {
				checks = append(slices.Clip(checks), c)
			}
		}
	}
	for _, c := range checks {
		plan = append(plan, planned{c, func(t *testing.T, e *env) { e.store = newStore(t) }})
	}
	plan = append(plan, executorPlan(storeExecutors(newStore, cfg))...)
	runAll(t, cfg, plan)
}

// storeExecutors makes cas executors that share one store: the nodes of a
// cluster. They retry with backoff, so contention checks measure the store,
// not the strategy, but give up after kitAttempts lost races in a row: the
// executors' clock is the kit's frozen fake clock, on which a time budget
// would never run out.
func storeExecutors(newStore StoreFactory, cfg *config) ExecutorFactory {
	return func(t *testing.T, c clock.Clock) []bucketgrid.Executor {
		s := newStore(t)
		execs := make([]bucketgrid.Executor, cfg.nodes)
		for i := range execs {
			execs[i] = cas.New(s, cas.WithClock(c), cas.WithRetry(kitRetry()))
		}
		return execs
	}
}

// kitAttempts bounds the attempts of one request through the kit's
// executors: with a 10 ms backoff cap, a request gives up within about a
// second of real time, while three executors sharing a key (each coalescing
// its own callers) lose 100 races in a row with odds below 1e-17.
const kitAttempts = 100

// kitRetry is the kit executors' strategy: backoff with full jitter, ended
// by an attempt count rather than a time budget (see storeExecutors).
func kitRetry() retry.Strategy {
	backoff := retry.Backoff(retry.BackoffConfig{Budget: time.Hour})
	return retry.Func(func(m retry.Metadata) retry.Decision {
		if m.Attempt >= kitAttempts {
			return retry.Decision{Action: retry.Stop}
		}
		return backoff.Next(m)
	})
}
