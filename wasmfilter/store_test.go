package wasmfilter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/shareddata"
)

// The fake shared data must follow Envoy's rules exactly, or every test
// built on it proves nothing.
func TestSharedDataFollowsEnvoy(t *testing.T) {
	d := shareddata.New()
	if _, _, st := d.Get("k"); st != shareddata.NotFound {
		t.Fatalf("absent key: status %d", st)
	}
	if st := d.Set("k", []byte("a"), 12345); st != shareddata.OK {
		t.Fatalf("a non-zero cas on an absent key creates it in Envoy; got status %d", st)
	}
	v, c1, _ := d.Get("k")
	if string(v) != "a" || c1 == 0 {
		t.Fatalf("get: %q cas %d", v, c1)
	}
	if st := d.Set("k", []byte("b"), c1+1); st != shareddata.CASMismatch {
		t.Fatalf("wrong cas: status %d", st)
	}
	if st := d.Set("k", []byte("b"), c1); st != shareddata.OK {
		t.Fatalf("right cas: status %d", st)
	}
	if st := d.Set("k", []byte("c"), c1); st != shareddata.CASMismatch {
		t.Fatalf("stale cas: status %d", st)
	}
	if st := d.Set("k", []byte("d"), 0); st != shareddata.OK {
		t.Fatalf("cas 0 is unconditional: status %d", st)
	}
	// One process-wide counter: another key's write moves it too.
	_, c2, _ := d.Get("k")
	d.Set("other", nil, 0)
	d.Set("k", []byte("e"), 0)
	if _, c3, _ := d.Get("k"); c3 != c2+2 {
		t.Fatalf("cas %d after %d and a write elsewhere, want %d", c3, c2, c2+2)
	}
	d.SetNextCas(^uint32(0))
	d.Set("k", nil, 0)
	d.Set("k", nil, 0)
	if _, c, _ := d.Get("k"); c != 1 {
		t.Fatalf("cas after wrap-around %d, want 1 (0 is skipped)", c)
	}
}

type storeFixture struct {
	shared *shareddata.Data
	clock  *atomic.Int64
	store  *Store
}

func newStoreFixture(slots uint32) *storeFixture {
	f := &storeFixture{shared: shareddata.New(), clock: newClock()}
	h := newFakeHost(f.shared, f.clock, "")
	f.store = NewStore(h, "p", slots, nil)
	return f
}

func TestStoreInsertGetReplaceDelete(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(16)
	s := f.store
	if _, _, found, err := s.Get(ctx, "a"); found || err != nil {
		t.Fatalf("absent: found %v err %v", found, err)
	}
	if ok, err := s.Insert(ctx, "a", []byte("v1"), 0); !ok || err != nil {
		t.Fatalf("insert: %v %v", ok, err)
	}
	if ok, err := s.Insert(ctx, "a", []byte("v2"), 0); ok || err != nil {
		t.Fatalf("second insert must be a lost race: %v %v", ok, err)
	}
	data, ver, found, err := s.Get(ctx, "a")
	if string(data) != "v1" || !found || err != nil {
		t.Fatalf("get: %q %v %v", data, found, err)
	}
	if ok, _ := s.Replace(ctx, "a", []byte("v3"), ver, 0); !ok {
		t.Fatal("replace with the read version failed")
	}
	if ok, err := s.Replace(ctx, "a", []byte("v4"), ver, 0); ok || err != nil {
		t.Fatalf("replace with a stale version: %v %v", ok, err)
	}
	if err := s.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, _, found, _ := s.Get(ctx, "a"); found {
		t.Fatal("found after delete")
	}
	if ok, err := s.Replace(ctx, "a", []byte("v5"), ver, 0); ok || err != nil {
		t.Fatalf("replace after delete: %v %v", ok, err)
	}
	// The tombstone is reused, by CAS, for the next insert.
	if ok, _ := s.Insert(ctx, "a", []byte("v6"), 0); !ok {
		t.Fatal("insert over a tombstone failed")
	}
	if n := f.shared.Len(); n != 1 {
		t.Fatalf("%d shared-data keys, want 1 slot", n)
	}
}

func TestStoreTTLFreesTheSlot(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(1) // one slot: every key collides
	s := f.store
	if ok, _ := s.Insert(ctx, "a", []byte("x"), time.Second); !ok {
		t.Fatal("insert a")
	}
	if _, err := s.Insert(ctx, "b", []byte("y"), time.Second); !errors.Is(err, ErrNoFreeSlot) || !errors.Is(err, cas.ErrStore) {
		t.Fatalf("full table: %v, want ErrNoFreeSlot (a cas.ErrStore)", err)
	}
	f.clock.Add(int64(time.Second) - 1)
	if _, _, found, _ := s.Get(ctx, "a"); !found {
		t.Fatal("expired early")
	}
	f.clock.Add(1)
	if _, _, found, _ := s.Get(ctx, "a"); found {
		t.Fatal("not expired at its TTL")
	}
	if ok, err := s.Insert(ctx, "b", []byte("y"), 0); !ok || err != nil {
		t.Fatalf("b could not take the expired slot: %v %v", ok, err)
	}
	if data, _, found, _ := s.Get(ctx, "b"); !found || string(data) != "y" {
		t.Fatal("b not stored")
	}
}

func TestStoreProbesPastCollisions(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(4)
	s := f.store
	// Four slots, four probes: four keys fit whatever their hashes.
	for i := range 4 {
		if ok, err := s.Insert(ctx, fmt.Sprint("k", i), []byte{byte(i)}, 0); !ok || err != nil {
			t.Fatalf("insert %d: %v %v", i, ok, err)
		}
	}
	for i := range 4 {
		data, _, found, _ := s.Get(ctx, fmt.Sprint("k", i))
		if !found || data[0] != byte(i) {
			t.Fatalf("k%d: %v %v", i, found, data)
		}
	}
	if _, err := s.Insert(ctx, "k4", nil, 0); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("fifth key: %v", err)
	}
	// A record of another format version occupies its slot and survives.
	f.shared.Set("p/0", []byte{99, 1, 2}, 0)
	for i := range 4 {
		_ = s.Delete(ctx, fmt.Sprint("k", i))
	}
	for i := range 3 {
		if ok, err := s.Insert(ctx, fmt.Sprint("n", i), nil, 0); !ok || err != nil {
			t.Fatalf("n%d: %v %v", i, ok, err)
		}
	}
	if _, err := s.Insert(ctx, "n3", nil, 0); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("the foreign record was overwritten: %v", err)
	}
	if v, _, _ := f.shared.Get("p/0"); v[0] != 99 {
		t.Fatal("foreign record overwritten")
	}
}

func TestStoreErrorsAreNotLostRaces(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(16)
	f.shared.Fail = func(op, key string) uint32 { return uint32(StatusInternalFailure) }
	if _, _, _, err := f.store.Get(ctx, "a"); !errors.Is(err, cas.ErrStore) || !strings.Contains(err.Error(), "INTERNAL_FAILURE") {
		t.Fatalf("get: %v", err)
	}
	if ok, err := f.store.Insert(ctx, "a", nil, 0); ok || !errors.Is(err, cas.ErrStore) {
		t.Fatalf("insert: %v %v", ok, err)
	}
	if ok, err := f.store.Replace(ctx, "a", nil, 1, 0); ok || !errors.Is(err, cas.ErrStore) {
		t.Fatalf("replace: %v %v", ok, err)
	}
}

// TestFirstInsertRaceIsBounded shows the one write Envoy cannot make
// conditional, and its bound: when two VMs create the same never-written
// slot at once, one consumption is lost, once; afterwards every write is a
// real compare-and-swap. The filter prepares its slots when configured,
// which removes the race from request handling.
func TestFirstInsertRaceIsBounded(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"policies": [{"name": "p", "slots": 64,
	  "bandwidths": [{"capacity": 10, "refill_tokens": 1, "period": "1h"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	set, _ := cfg.compile()
	pol := &set.policies[0]
	req := func() core.Request {
		return core.Request{Mode: core.ModeCreateIfAbsent, Config: &pol.config,
			Ops: []core.Op{{Kind: core.OpTryConsumeAndReturnRemaining, Tokens: 1}}}
	}
	run := func(prepare bool) int {
		shared, clock := shareddata.New(), newClock()
		var execs [2]*cas.Executor
		for i := range execs {
			store := NewStore(newFakeHost(shared, clock, ""), "p", 64, nil)
			if prepare {
				if err := store.Prepare(); err != nil {
					t.Fatal(err)
				}
			}
			execs[i] = newExecutor(store, store.clock, 16)
		}
		admitted := 0
		consume := func(e *cas.Executor) {
			resp, err := e.Execute(context.Background(), "k", req())
			if err != nil {
				t.Fatal(err)
			}
			if resp.Results[0].OK {
				admitted++
			}
		}
		// VM 2's whole request runs between VM 1's read (bucket absent) and
		// VM 1's write of the new bucket.
		var once bool
		shared.BeforeSet = func(key string) {
			if !once {
				once = true
				consume(execs[1])
			}
		}
		consume(execs[0])
		shared.BeforeSet = nil
		for range 20 {
			consume(execs[0])
			consume(execs[1])
		}
		return admitted
	}
	if got := run(false); got != 11 {
		t.Fatalf("unprepared: admitted %d, want capacity 10 + exactly 1 lost to the first-insert race", got)
	}
	if got := run(true); got != 10 {
		t.Fatalf("prepared: admitted %d, want exactly 10", got)
	}
}

func TestPrepareCreatesEverySlotOnce(t *testing.T) {
	f := newStoreFixture(100)
	if err := f.store.Prepare(); err != nil {
		t.Fatal(err)
	}
	if n := f.shared.Len(); n != 101 {
		t.Fatalf("%d keys, want 100 slots and the ready marker", n)
	}
	ctx := context.Background()
	if ok, _ := f.store.Insert(ctx, "a", []byte("x"), 0); !ok {
		t.Fatal("insert into a prepared slot")
	}
	sets := f.shared.Sets()
	if err := f.store.Prepare(); err != nil { // another worker starting
		t.Fatal(err)
	}
	if f.shared.Sets() != sets {
		t.Fatal("Prepare rewrote existing slots")
	}
	// Without the marker (a worker died half-way), existing slots are kept.
	f.shared.Set("p/ready", []byte("no"), 0)
	sets = f.shared.Sets()
	if err := f.store.Prepare(); err != nil {
		t.Fatal(err)
	}
	if f.shared.Sets() != sets+1 {
		t.Fatalf("%d writes, want only the marker", f.shared.Sets()-sets)
	}
	if data, _, found, _ := f.store.Get(ctx, "a"); !found || string(data) != "x" {
		t.Fatal("Prepare destroyed a bucket")
	}
}
