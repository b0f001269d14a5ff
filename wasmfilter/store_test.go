package wasmfilter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/internal/harness/keyrule"
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

func newStoreFixture(slots uint32, evict bool) *storeFixture {
	f := &storeFixture{shared: shareddata.New(), clock: newClock()}
	f.store = f.vm(slots, evict)
	return f
}

// vm returns another VM's store over the fixture's shared data and clock.
func (f *storeFixture) vm(slots uint32, evict bool) *Store {
	return NewStore(newFakeHost(f.shared, f.clock, ""), "p", StoreConfig{Slots: slots, EvictOldest: evict})
}

func TestStoreInsertGetReplaceDelete(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(16, false)
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
	if ok, _ := s.Insert(ctx, "a", []byte("v6"), 0); !ok {
		t.Fatal("insert after delete failed")
	}
	// One slot and one directory: shared data never grows past the table.
	if n := f.shared.Len(); n != 2 {
		t.Fatalf("%d shared-data keys, want one slot and one directory", n)
	}
}

// TestStoreRejectsKeysItCannotHold: CheckKey and every method refuse an
// empty key and one over MaxKeyLen with a *core.KeyError that does not show
// the key, before any shared-data call; through a cas.Executor the refusal
// comes from CheckKey, as the client's error (the filter's 400), not as a
// store failure.
func TestStoreRejectsKeysItCannotHold(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(16, false)
	e := cas.New(f.store)
	req := wire.Request{Ops: []wire.Op{{Kind: wire.OpTryConsume, Tokens: 1}}}
	for _, key := range []string{"", "over-the-limit:" + strings.Repeat("k", MaxKeyLen-14)} {
		if err := keyrule.Refused(ctx, f.store, key); err != nil {
			t.Errorf("%d bytes: %v", len(key), err)
		}
		_, err := e.Execute(ctx, key, req)
		var ke *core.KeyError
		if !errors.As(err, &ke) || errors.Is(err, cas.ErrStore) {
			t.Errorf("Execute(%d bytes): %v, want the *core.KeyError of CheckKey", len(key), err)
		}
		if rerr := e.Remove(ctx, key); !errors.As(rerr, &ke) {
			t.Errorf("Remove(%d bytes): %v, want a *core.KeyError", len(key), rerr)
		}
	}
	if st := e.Stats(); st.InvalidKeys != 4 || st.Attempts != 0 || st.StoreErrors != 0 {
		t.Errorf("executor stats %+v, want 4 invalid keys, no attempt, no store error", st)
	}
	if n := f.shared.Gets() + f.shared.Sets() + f.shared.Len(); n != 0 {
		t.Fatalf("an invalid key cost %d shared-data calls", n)
	}
	if err := f.store.CheckKey(strings.Repeat("k", MaxKeyLen)); err != nil {
		t.Fatalf("CheckKey of MaxKeyLen bytes: %v", err)
	}
	if ok, err := f.store.Insert(ctx, strings.Repeat("k", MaxKeyLen), nil, 0); !ok || err != nil {
		t.Fatalf("a key of MaxKeyLen bytes: %v %v", ok, err)
	}
}

func TestStoreTTLFreesTheSlot(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(1, false) // one slot: every key competes for it
	s := f.store
	if ok, _ := s.Insert(ctx, "a", []byte("x"), time.Second); !ok {
		t.Fatal("insert a")
	}
	f.clock.Add(int64(300 * time.Millisecond))
	_, err := s.Insert(ctx, "b", []byte("y"), time.Second)
	var full *TableFullError
	if !errors.As(err, &full) || !errors.Is(err, ErrTableFull) || errors.Is(err, cas.ErrStore) {
		t.Fatalf("full table: %v, want a *TableFullError that is not a store failure", err)
	}
	if full.Wait != 700*time.Millisecond {
		t.Errorf("table full: wait %v, want the 700ms until a's bucket expires", full.Wait)
	}
	f.clock.Add(int64(700*time.Millisecond) - 1)
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
	if _, _, found, _ := s.Get(ctx, "a"); found {
		t.Fatal("a found in b's slot")
	}
	if s.Evictions() != 0 {
		t.Fatal("taking an expired slot counted as an eviction")
	}
}

func TestStoreFillsEverySlot(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(4, false)
	s := f.store
	for i := range 4 {
		if ok, err := s.Insert(ctx, fmt.Sprint("k", i), []byte{byte(i)}, time.Hour); !ok || err != nil {
			t.Fatalf("insert %d: %v %v", i, ok, err)
		}
	}
	for i := range 4 {
		data, _, found, _ := s.Get(ctx, fmt.Sprint("k", i))
		if !found || data[0] != byte(i) {
			t.Fatalf("k%d: %v %v", i, found, data)
		}
	}
	if _, err := s.Insert(ctx, "k4", nil, 0); !errors.Is(err, ErrTableFull) {
		t.Fatalf("fifth key: %v", err)
	}
	// A record of another format version occupies its slot and survives.
	for i := range 4 {
		_ = s.Delete(ctx, fmt.Sprint("k", i))
	}
	f.shared.Set("p/s/0", []byte{99, 1, 2}, 0)
	for i := range 3 {
		if ok, err := s.Insert(ctx, fmt.Sprint("n", i), nil, time.Hour); !ok || err != nil {
			t.Fatalf("n%d: %v %v", i, ok, err)
		}
	}
	if _, err := s.Insert(ctx, "n3", nil, 0); !errors.Is(err, ErrTableFull) {
		t.Fatalf("the foreign record was overwritten: %v", err)
	}
	if v, _, _ := f.shared.Get("p/s/0"); v[0] != 99 {
		t.Fatal("foreign record overwritten")
	}
}

func TestStoreErrorsAreNotLostRaces(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(16, false)
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
	f.shared.Fail = nil
	f.shared.Set("p/d/0", []byte("garbage"), 0)
	if _, _, _, err := f.store.Get(ctx, "a"); !errors.Is(err, cas.ErrStore) {
		t.Fatalf("a corrupt directory: %v, want a store failure", err)
	}
}

// TestStoreReplaceAfterExpiryIsALostRace: an expired key is gone, so a
// Replace with a version read before the expiry must fail, as it does in
// memstore (the cas.Store contract).
func TestStoreReplaceAfterExpiryIsALostRace(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(16, false)
	s := f.store
	s.Insert(ctx, "k", []byte("v"), time.Second)
	_, ver, _, _ := s.Get(ctx, "k")
	f.clock.Add(int64(time.Second))
	if ok, err := s.Replace(ctx, "k", []byte("w"), ver, time.Second); ok || err != nil {
		t.Fatalf("Replace over an expired record: ok=%v err=%v, want a lost race", ok, err)
	}
	// The same through another VM's store, which has no memory of the Get.
	if ok, err := f.vm(16, false).Replace(ctx, "k", []byte("w"), ver, time.Second); ok || err != nil {
		t.Fatalf("Replace over an expired record from another VM: ok=%v err=%v", ok, err)
	}
}

// TestStoreExpiryWritersShareOneToken is a regression test:
// VM A reads key k, k's bucket expires, VM B finds it absent and inserts it
// anew, and A's Replace arrives late — with a clock that still sees the old
// record live, as another VM's clock may. B's insert and A's replace must
// compare-and-swap the same token, so that A loses and retries; before, B's
// insert could land in another probed slot, A's replace succeeded too, and
// one of the two consumptions was lost. Each iteration uses another key, so
// the keys' slots fall in every arrangement.
func TestStoreExpiryWritersShareOneToken(t *testing.T) {
	ctx := context.Background()
	for i := range 64 {
		shared, clockB := shareddata.New(), newClock()
		clockA := new(atomic.Int64)
		a := NewStore(newFakeHost(shared, clockA, ""), "p", StoreConfig{Slots: 4})
		b := NewStore(newFakeHost(shared, clockB, ""), "p", StoreConfig{Slots: 4})
		k := fmt.Sprint("key-", i)
		// A filler with a shorter life occupies a slot k's probes may reach
		// first.
		if ok, err := b.Insert(ctx, "filler", []byte("f"), time.Second); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ok, err := b.Insert(ctx, k, []byte("old"), 10*time.Second); !ok || err != nil {
			t.Fatal(ok, err)
		}
		clockA.Store(clockB.Load())
		_, ver, found, err := a.Get(ctx, k)
		if !found || err != nil {
			t.Fatal(found, err)
		}
		clockB.Add(int64(10 * time.Second)) // both records have expired for B
		if _, _, found, _ := b.Get(ctx, k); found {
			t.Fatal("expired record found")
		}
		if ok, err := b.Insert(ctx, k, []byte("b"), 10*time.Second); !ok || err != nil {
			t.Fatalf("%s: B's insert after expiry: %v %v", k, ok, err)
		}
		if ok, _ := a.Replace(ctx, k, []byte("a"), ver, 10*time.Second); ok {
			t.Fatalf("%s: A's replace with a version from before the expiry succeeded after B's insert: "+
				"two writers, two tokens, one write lost", k)
		}
		if data, _, _, _ := b.Get(ctx, k); string(data) != "b" {
			t.Fatalf("%s: %q after the race, want B's insert", k, data)
		}
	}
}

func TestStoreEvictsTheBucketClosestToFull(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(4, true)
	s := f.store
	ttls := []time.Duration{4 * time.Hour, time.Hour, 3 * time.Hour, 2 * time.Hour}
	for i, ttl := range ttls {
		if ok, err := s.Insert(ctx, fmt.Sprint("k", i), []byte(fmt.Sprint("k", i)), ttl); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if ok, err := s.Insert(ctx, "new", []byte("new"), time.Hour); !ok || err != nil {
		t.Fatalf("insert into a full table with eviction: %v %v", ok, err)
	}
	if s.Evictions() != 1 {
		t.Fatalf("%d evictions, want 1", s.Evictions())
	}
	for i := range ttls {
		data, _, found, _ := s.Get(ctx, fmt.Sprint("k", i))
		if i == 1 {
			if found {
				t.Fatalf("k1, the bucket closest to full, was not evicted (holds %q)", data)
			}
			continue
		}
		if !found || string(data) != fmt.Sprint("k", i) {
			t.Fatalf("k%d: %q %v", i, data, found)
		}
	}
	// The evicted client starts again from an absent bucket (evicting in
	// turn the one closest to full, "new"); no key ever reads another's.
	if ok, err := s.Insert(ctx, "k1", []byte("k1"), 90*time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	for _, k := range []string{"k0", "k1", "k2", "k3", "new"} {
		data, _, found, _ := s.Get(ctx, k)
		if found != (k != "new") || found && string(data) != k {
			t.Fatalf("%s: %q found %v", k, data, found)
		}
	}
	// Each eviction removed the evicted key's directory entry.
	entries := 0
	for d := range s.dirs {
		es, _, _ := s.readDir(d)
		entries += len(es)
	}
	if entries != 4 {
		t.Fatalf("%d directory entries, want the 4 live keys'", entries)
	}
}

// keysInOneDirectory returns n keys that hash to directory 0 of s.
func keysInOneDirectory(s *Store, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprint("client-", i)
		if s.hash(k).dir == 0 {
			keys = append(keys, k)
		}
	}
	return keys
}

func TestStoreFullDirectory(t *testing.T) {
	ctx := context.Background()
	for _, evict := range []bool{false, true} {
		f := newStoreFixture(1024, evict)
		s := f.store
		keys := keysInOneDirectory(s, directoryCap+1)
		for i, k := range keys[:directoryCap] {
			ttl := time.Duration(directoryCap+1-i) * time.Minute // keys[last] expires first
			if ok, err := s.Insert(ctx, k, []byte(k), ttl); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}
		last := keys[directoryCap]
		ok, err := s.Insert(ctx, last, []byte(last), time.Hour)
		if !evict {
			if !errors.Is(err, ErrTableFull) {
				t.Fatalf("full directory without eviction: %v %v", ok, err)
			}
			// Stale entries do not count: once one bucket expires, the
			// directory has room again.
			f.clock.Add(int64(2 * time.Minute))
			if ok, err := s.Insert(ctx, last, []byte(last), time.Hour); !ok || err != nil {
				t.Fatalf("after an expiry: %v %v", ok, err)
			}
			continue
		}
		if !ok || err != nil {
			t.Fatalf("full directory with eviction: %v %v", ok, err)
		}
		if _, _, found, _ := s.Get(ctx, keys[directoryCap-1]); found {
			t.Fatal("the bucket closest to full was not evicted")
		}
		for _, k := range append(keys[:directoryCap-1:directoryCap-1], last) {
			if data, _, found, _ := s.Get(ctx, k); !found || string(data) != k {
				t.Fatalf("%s: %q %v", k, data, found)
			}
		}
	}
}

// TestStoreChurnKeepsDirectoriesSmall: clients come and go for many
// lifetimes of the table; every directory entry still leads to its record
// (each taker of a slot removes the old owner's entry), so the directories
// hold at most one entry per slot.
func TestStoreChurnKeepsDirectoriesSmall(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(256, false)
	s := f.store
	for i := range 20 * 256 {
		k := fmt.Sprint("c", i)
		if ok, err := s.Insert(ctx, k, []byte(k), time.Minute); !ok || err != nil {
			t.Fatalf("client %d: %v %v", i, ok, err)
		}
		f.clock.Add(int64(time.Minute / 200)) // about 200 live clients at a time
	}
	longest, entries := 0, 0
	for d := range s.dirs {
		es, _, _ := s.readDir(d)
		longest, entries = max(longest, len(es)), entries+len(es)
		for _, e := range es {
			rec, _, _ := s.readSlot(e.slot)
			if rec.gen != e.gen || s.hash(rec.key).fp != e.fp {
				t.Fatalf("directory %d: stale entry %+v (slot holds %q at generation %d)", d, e, rec.key, rec.gen)
			}
		}
	}
	if entries > int(s.slots) {
		t.Fatalf("%d directory entries for %d slots", entries, s.slots)
	}
	t.Logf("longest directory: %d entries (%d slots per directory)", longest, SlotsPerDirectory)
}

// TestFirstInsertRaceIsBounded shows the one write Envoy cannot make
// conditional, and its bound: when two VMs create the same never-written
// slot at once, one consumption is lost, once; afterwards every write is a
// real compare-and-swap. The filter prepares its slots when configured,
// which removes the race from request handling.
func TestFirstInsertRaceIsBounded(t *testing.T) {
	config, err := core.NewConfig(core.Greedy(10, 1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	req := func() wire.Request {
		return wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &config,
			Ops: []wire.Op{{Kind: wire.OpTryConsumeAndReturnRemaining, Tokens: 1}}}
	}
	run := func(prepare bool) int {
		shared, clock := shareddata.New(), newClock()
		var execs [2]*cas.Executor
		for i := range execs {
			store := NewStore(newFakeHost(shared, clock, ""), "p", StoreConfig{Slots: 64})
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
		// VM 1's first write.
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

func TestPrepareCreatesEveryEntryOnce(t *testing.T) {
	f := newStoreFixture(100, false)
	if err := f.store.Prepare(); err != nil {
		t.Fatal(err)
	}
	if n := f.shared.Len(); n != 100+13+1 {
		t.Fatalf("%d keys, want 100 slots, 13 directories and the ready marker", n)
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
		t.Fatal("Prepare rewrote existing entries")
	}
	// Without the marker (a worker died half-way), existing entries are kept.
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

// TestStorePlacesFollowTheDirectory: a VM remembers where it found a key;
// when the key has moved (evicted by another VM, deleted, inserted again
// elsewhere), the remembered slot is never read as the key's bucket.
func TestStorePlacesFollowTheDirectory(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(2, true)
	a, b := f.store, f.vm(2, true)
	get := func(s *Store, k string) string {
		t.Helper()
		data, _, found, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			return "-"
		}
		return string(data)
	}
	b.Insert(ctx, "k", []byte("k1"), time.Hour)
	b.Insert(ctx, "x", []byte("x"), 2*time.Hour)
	if got := get(a, "k"); got != "k1" { // a remembers k's slot
		t.Fatal(got)
	}
	gets := f.shared.Gets()
	if get(a, "k"); f.shared.Gets()-gets != 1 {
		t.Fatalf("a remembered key costs %d reads, want 1 (the slot)", f.shared.Gets()-gets)
	}
	b.Insert(ctx, "l", []byte("l"), 3*time.Hour) // evicts k, closest to full: l takes k's slot
	if got := get(a, "k"); got != "-" {
		t.Fatalf("k after its eviction reads %q, want absent", got)
	}
	b.Insert(ctx, "k", []byte("k2"), time.Hour) // k comes back (evicting x)
	if got := get(a, "k"); got != "k2" {
		t.Fatalf("k after coming back: %q", got)
	}
	if err := b.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if got := get(a, "k"); got != "-" {
		t.Fatalf("k after delete: %q", got)
	}
	b.Insert(ctx, "k", []byte("k3"), time.Hour) // the same slot, a new generation
	if got := get(a, "k"); got != "k3" {
		t.Fatalf("k after a new insert: %q", got)
	}
}

// TestStorePruningNeverOrphansARecord: VM a reuses key v's expired record
// in place while VM b, inserting into the same full directory, drops v's
// expired entry to make room. b frees v's slot by compare-and-swap before
// dropping the entry, so a's write loses and no live record of v is left
// that the directory does not name (which a's memory of v's slot would
// still trust, splitting v's bucket in two).
func TestStorePruningNeverOrphansARecord(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(1024, false)
	a, b, c := f.store, f.vm(1024, false), f.vm(1024, false)
	keys := keysInOneDirectory(a, directoryCap+1)
	v, newcomer := keys[0], keys[directoryCap]
	for _, k := range keys[:directoryCap] {
		if ok, err := a.Insert(ctx, k, []byte(k), time.Minute); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	a.Get(ctx, v) // a remembers v's slot
	f.clock.Add(int64(time.Minute))
	var once bool
	f.shared.BeforeSet = func(string) {
		if !once {
			once = true
			if ok, err := b.Insert(ctx, newcomer, []byte(newcomer), time.Minute); !ok || err != nil {
				t.Errorf("newcomer: %v %v", ok, err)
			}
		}
	}
	ok, err := a.Insert(ctx, v, []byte("v again"), time.Minute) // reuse in place
	f.shared.BeforeSet = nil
	if err != nil {
		t.Fatal(err)
	}
	if !ok { // lost the race, as the executor would, and tries again
		if ok, err = a.Insert(ctx, v, []byte("v again"), time.Minute); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	da, _, fa, _ := a.Get(ctx, v)
	dc, _, fc, _ := c.Get(ctx, v)
	if !fa || !fc || string(da) != "v again" || string(dc) != "v again" {
		t.Fatalf("v: a reads %q (%v), a VM without memory reads %q (%v): one bucket, two places", da, fa, dc, fc)
	}
}

// TestStoreViewsAgreeUnderInterleaving interleaves random operations of
// three VMs' stores — one operation may run between another's read and
// write — over a prepared table too small for the keys (or a directory too
// small for them), with expiry and eviction, and checks after each step
// that every VM, whatever it remembers, reads each key exactly as a VM with
// no memory does: no key ever has two live buckets.
func TestStoreViewsAgreeUnderInterleaving(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		evict := seed%2 == 0
		slots := uint32(8)
		var keys []string
		for i := range 12 {
			keys = append(keys, "k"+strconv.Itoa(i))
		}
		if seed%4 >= 2 { // keys that share one directory of a large table
			slots = 1024
			keys = keysInOneDirectory(NewStore(nil, "p", StoreConfig{Slots: slots, Clock: clock.Func(func() int64 { return 0 }, true)}), directoryCap+8)
		}
		f := newStoreFixture(slots, evict)
		if err := f.store.Prepare(); err != nil {
			t.Fatal(err)
		}
		vms := []*Store{f.store, f.vm(slots, evict), f.vm(slots, evict)}
		op := func(s *Store) {
			k := keys[rng.IntN(len(keys))]
			data, ver, found, err := s.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			ttl := time.Duration(1+rng.IntN(5)) * time.Second
			switch {
			case rng.IntN(10) == 0:
				err = s.Delete(ctx, k)
			case found:
				_, err = s.Replace(ctx, k, append(data, '+'), ver, ttl)
			default:
				_, err = s.Insert(ctx, k, []byte(k), ttl)
			}
			if err != nil && !errors.Is(err, ErrTableFull) {
				t.Fatal(err)
			}
		}
		depth := 0
		f.shared.BeforeSet = func(string) {
			if depth == 0 && rng.IntN(3) == 0 {
				depth++
				op(vms[rng.IntN(len(vms))])
				depth--
			}
		}
		for step := range 300 {
			op(vms[rng.IntN(len(vms))])
			if rng.IntN(4) == 0 {
				f.clock.Add(int64(rng.IntN(2000)) * int64(time.Millisecond))
			}
			saved := f.shared.BeforeSet
			f.shared.BeforeSet = nil
			fresh := f.vm(slots, false)
			for _, k := range keys {
				want, _, wantFound, _ := fresh.Get(ctx, k)
				for j, s := range vms {
					got, _, found, _ := s.Get(ctx, k)
					if found != wantFound || string(got) != string(want) {
						t.Fatalf("seed %d step %d: VM %d reads %s as %q (%v), the directory says %q (%v)",
							seed, step, j, k, got, found, want, wantFound)
					}
				}
			}
			f.shared.BeforeSet = saved
		}
	}
}
