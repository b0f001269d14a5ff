package tck

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// The kit must catch broken backends. Each store below breaks one rule; the
// test runs the kit against it and asserts that the named checks fail with a
// message that tells the author what to fix — and that the kit reports
// nothing against the correct store.

// nonComparing ignores the version on Replace: a plain overwrite.
type nonComparing struct{ *memstore.Store }

func (s nonComparing) Replace(ctx context.Context, k string, d []byte, _ cas.Version, ttl time.Duration) (bool, error) {
	_, v, found, err := s.Store.Get(ctx, k)
	if err != nil || !found {
		return false, err
	}
	runtime.Gosched() // a read-then-write, with a window as a network would have
	return s.Store.Replace(ctx, k, d, v, ttl)
}

// dropping acknowledges every write but silently drops one in a thousand of
// those that would have succeeded.
type dropping struct {
	*memstore.Store
	mu sync.Mutex
	n  int
}

func (s *dropping) drop() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return s.n%1000 == 0
}

func (s *dropping) Replace(ctx context.Context, k string, d []byte, v cas.Version, ttl time.Duration) (bool, error) {
	if _, cur, found, err := s.Store.Get(ctx, k); err == nil && found && cur == v && s.drop() {
		return true, nil // claims success, writes nothing
	}
	return s.Store.Replace(ctx, k, d, v, ttl)
}

// ttlIgnoring drops every TTL.
type ttlIgnoring struct{ *memstore.Store }

func (s ttlIgnoring) Insert(ctx context.Context, k string, d []byte, _ time.Duration) (bool, error) {
	return s.Store.Insert(ctx, k, d, 0)
}

func (s ttlIgnoring) Replace(ctx context.Context, k string, d []byte, v cas.Version, _ time.Duration) (bool, error) {
	return s.Store.Replace(ctx, k, d, v, 0)
}

// errorsAsConflicts reports every failure as a lost race, as Bucket4j's
// MongoDB backend does.
type errorsAsConflicts struct{ *memstore.Store }

func (s errorsAsConflicts) Insert(ctx context.Context, k string, d []byte, ttl time.Duration) (bool, error) {
	ok, err := s.Store.Insert(ctx, k, d, ttl)
	if err != nil {
		return false, nil
	}
	return ok, nil
}

func (s errorsAsConflicts) Replace(ctx context.Context, k string, d []byte, v cas.Version, ttl time.Duration) (bool, error) {
	ok, err := s.Store.Replace(ctx, k, d, v, ttl)
	if err != nil {
		return false, nil
	}
	return ok, nil
}

func TestKitCatchesBrokenStores(t *testing.T) {
	tests := []struct {
		name     string
		store    func() cas.Store
		catching map[string]string // check name → phrase its failure must contain
	}{
		{"replace that does not compare", func() cas.Store { return nonComparing{memstore.New()} }, map[string]string{
			"StoreContract":                  "Replace with a stale version succeeded",
			"StoreAtomicityProbe":            "not an atomic compare-and-swap",
			"ExactAccountingUnderContention": "granted twice",
		}},
		{"drops one write in a thousand", func() cas.Store { return &dropping{Store: memstore.New()} }, map[string]string{
			"StoreAtomicityProbe":            "lost",
			"ExactAccountingUnderContention": "granted twice",
		}},
		{"ignores TTL", func() cas.Store { return ttlIgnoring{memstore.New()} }, map[string]string{
			"StoreTTL":   "ignores TTLs",
			"Expiration": "still exists",
		}},
		{"reports errors as lost races", func() cas.Store { return errorsAsConflicts{memstore.New()} }, map[string]string{
			"StoreErrorsAreNotLostRaces": "reported as a lost race",
		}},
	}
	all := append(append([]check(nil), storeChecks...), executorChecks...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := newConfig(nil)
			caught := map[string]bool{}
			for _, c := range all {
				phrase, want := tt.catching[c.name]
				if !want {
					continue
				}
				failures, _ := runCheck(t, cfg, c, func(e *env) {
					e.store = tt.store()
					e.execs = storeExecutors(func(*testing.T) cas.Store { return e.store }, cfg)(t, e.now())
				})
				for _, f := range failures {
					if strings.Contains(f, phrase) {
						caught[c.name] = true
						t.Logf("%s caught it: %s", c.name, f)
					}
				}
				if !caught[c.name] {
					t.Errorf("check %s did not catch a store that %s (failures: %q)", c.name, tt.name, failures)
				}
			}
		})
	}
}

// TestKitPassesCorrectStore guards the other direction: no check may fail a
// correct store, or the kit's failures would mean nothing.
func TestKitPassesCorrectStore(t *testing.T) {
	cfg := newConfig(nil)
	for _, c := range append(append([]check(nil), storeChecks...), executorChecks...) {
		failures, skip := runCheck(t, cfg, c, func(e *env) {
			e.store = memstore.New()
			e.execs = storeExecutors(func(*testing.T) cas.Store { return e.store }, cfg)(t, e.now())
		})
		if skip != "" || len(failures) > 0 {
			t.Errorf("%s on the reference store: skip %q, failures %q", c.name, skip, failures)
		}
	}
}

// racyExecutor runs core.Process between an unlocked read and write: the
// mistake an entry-processor backend makes when it forgets the per-key lock.
type racyExecutor struct {
	mu    sync.Mutex
	data  map[string][]byte
	clock clock.Clock
}

func (x *racyExecutor) Execute(ctx context.Context, key string, req core.Request) (core.Response, error) {
	x.mu.Lock()
	stored := x.data[key]
	x.mu.Unlock()
	runtime.Gosched() // widen the window, as a network hop would
	next, changed, resp := core.Process(stored, req, x.clock.Now())
	if changed {
		x.mu.Lock()
		x.data[key] = next
		x.mu.Unlock()
	}
	return resp, nil
}

func (x *racyExecutor) Remove(ctx context.Context, key string) error {
	x.mu.Lock()
	delete(x.data, key)
	x.mu.Unlock()
	return nil
}

func TestKitCatchesRacyExecutor(t *testing.T) {
	cfg := newConfig(nil)
	for _, name := range []string{"ExactAccountingUnderContention", "SingleInitialisation"} {
		var c check
		for _, x := range executorChecks {
			if x.name == name {
				c = x
			}
		}
		var caught bool
		for try := 0; try < 5 && !caught; try++ { // a race needs the scheduler's help
			failures, _ := runCheck(t, cfg, c, func(e *env) {
				racy := &racyExecutor{data: map[string][]byte{}, clock: e.clock}
				e.execs = []bucketgrid.Executor{racy, racy}
			})
			caught = len(failures) > 0
			if caught {
				t.Logf("%s caught the racy executor: %s", name, failures[0])
			}
		}
		if !caught {
			t.Errorf("%s did not catch an executor without a per-key lock", name)
		}
	}
}
