// Package tck is bucketgrid's compatibility test kit: one call runs every
// semantic and atomicity check against a backend, with a fake clock and
// fault injection.
//
//	func TestMyStore(t *testing.T) {
//		tck.RunStore(t, func(t *testing.T) cas.Store { return mystore.New(...) })
//	}
//
// RunStore checks a cas.Store: the SPI contract (lost races are not errors
// and errors are not lost races), TTLs, a store-level atomicity probe,
// injected conflicts, stale reads, outages and timeouts, clock skew between
// clients, and then everything Run checks, through cas executors that share
// the store as separate nodes would.
//
// Run checks any bucketgrid.Executor (an entry-processor grid, say): results
// equal to the pure model on scripted sequences, a single initialisation
// under racing creators, exact accounting under contention across nodes,
// two-sided rate bounds, a linearizability check of concurrent histories
// (porcupine), recovery, implicit configuration replacement races,
// expiration and removal.
//
// Unlike Bucket4j's kit it never sleeps to measure rates (time is faked), it
// checks lower as well as upper bounds, and it is itself tested: the kit's own
// tests run it against deliberately broken stores and assert that each is
// caught with a message a backend author can act on.
package tck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
)

// ExecutorFactory returns one or more executors that share one storage, as
// the nodes of a cluster would; the kit spreads calls over all of them. Every
// executor must take bucket time from c, a wall clock (Unix nanoseconds) that
// the kit fakes and advances itself; c is not a clock.Sleeper, so waits on it
// take real time. Use t.Cleanup to release resources.
type ExecutorFactory func(t *testing.T, c clock.Clock) []bucketgrid.Executor

// StoreFactory returns a store to check. Stores from one factory may share
// data: the kit uses keys unique to each run.
type StoreFactory func(t *testing.T) cas.Store

// Option adjusts the kit to a backend.
type Option func(*config)

type config struct {
	goroutines, perGoroutine int           // contention
	probeWorkers, probeEach  int           // store atomicity probe
	ttl                      time.Duration // shortest TTL the store honours
	noTTL                    string        // reason the store has no TTL
	noDelete                 string        // reason the store cannot delete
	nodes                    int           // executors per store in RunStore
}

func newConfig(opts []Option) *config {
	c := &config{goroutines: 8, perGoroutine: 1000, probeWorkers: 4, probeEach: 1000,
		ttl: 200 * time.Millisecond, nodes: 3}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithContention sets the contention checks' size: goroutines×perGoroutine
// consumptions on one key (default 8×1000). Lower it for slow servers.
func WithContention(goroutines, perGoroutine int) Option {
	return func(c *config) { c.goroutines, c.perGoroutine = goroutines, perGoroutine }
}

// WithProbe sets the store atomicity probe's size (default 4 workers × 1000
// increments).
func WithProbe(workers, each int) Option {
	return func(c *config) { c.probeWorkers, c.probeEach = workers, each }
}

// WithTTLResolution sets the shortest TTL the store honours exactly (default
// 200 ms; Couchbase needs 1 s). TTL checks wait a few times this long.
func WithTTLResolution(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithoutTTL declares that the store cannot expire entries, with the reason;
// the TTL and expiration checks are reported as skipped, not passed.
func WithoutTTL(reason string) Option { return func(c *config) { c.noTTL = reason } }

// WithoutDelete declares that the store cannot delete entries, with the
// reason; the removal and recovery checks are reported as skipped.
func WithoutDelete(reason string) Option { return func(c *config) { c.noDelete = reason } }

// env is what a check gets.
type env struct {
	t     *testing.T
	cfg   *config
	clock *clock.Fake
	run   string // unique per check run, prefixes keys
	ctx   context.Context

	mu       sync.Mutex
	failures []string

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
	run   func(e *env)
}

func runID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// start is the fake time checks begin at.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// runCheck runs one check and returns its failures; a skip reason is
// returned when the backend declared it cannot support the check.
func runCheck(t *testing.T, cfg *config, c check, setup func(e *env)) (failures []string, skip string) {
	switch {
	case strings.Contains(c.needs, "ttl") && cfg.noTTL != "":
		return nil, "store has no TTL: " + cfg.noTTL
	case strings.Contains(c.needs, "delete") && cfg.noDelete != "":
		return nil, "store cannot delete: " + cfg.noDelete
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := &env{t: t, cfg: cfg, clock: clock.NewFake(start), run: runID(), ctx: ctx}
	setup(e)
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(failNow); !ok {
					e.Errorf("panic: %v\n%s", r, debug.Stack())
				}
			}
		}()
		c.run(e)
	}()
	return e.failures, ""
}

func report(t *testing.T, failures []string, skip string) {
	t.Helper()
	if skip != "" {
		t.Skip(skip)
	}
	for _, f := range failures {
		t.Error(f)
	}
}

// Run checks executors from newExecutors. See the package documentation.
func Run(t *testing.T, newExecutors ExecutorFactory, opts ...Option) {
	t.Helper()
	cfg := newConfig(opts)
	for _, c := range executorChecks {
		t.Run(c.name, func(t *testing.T) {
			failures, skip := runCheck(t, cfg, c, func(e *env) {
				e.execs = newExecutors(t, e.now())
				if len(e.execs) == 0 {
					e.Fatalf("the ExecutorFactory returned no executor")
				}
			})
			report(t, failures, skip)
		})
	}
}

// RunStore checks stores from newStore: the store contract and fault
// handling, then every Run check through cas executors sharing one store.
func RunStore(t *testing.T, newStore StoreFactory, opts ...Option) {
	t.Helper()
	cfg := newConfig(opts)
	for _, c := range storeChecks {
		t.Run(c.name, func(t *testing.T) {
			failures, skip := runCheck(t, cfg, c, func(e *env) { e.store = newStore(t) })
			report(t, failures, skip)
		})
	}
	Run(t, storeExecutors(newStore, cfg), opts...)
}

// storeExecutors makes cas executors that share one store: the nodes of a
// cluster. They retry with backoff under a generous budget, so contention
// checks measure the store, not the strategy.
func storeExecutors(newStore StoreFactory, cfg *config) ExecutorFactory {
	return func(t *testing.T, c clock.Clock) []bucketgrid.Executor {
		s := newStore(t)
		execs := make([]bucketgrid.Executor, cfg.nodes)
		for i := range execs {
			execs[i] = cas.New(s, cas.WithClock(c), cas.WithRetry(generousBackoff()))
		}
		return execs
	}
}
