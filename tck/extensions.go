package tck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
)

// The optional extensions of cas.Store (cas.Writer, cas.Batcher) face the
// same rules as the four methods. RunStore runs the store checks below once
// more for each extension a store offers, on the store seen through that
// extension (writerStore, batcherStore: Insert and Replace done by Write,
// or Get, Insert and Replace each done by a batch of one), and adds the
// checks only an extension has: what a write reports, and batches of many
// operations.

// extensionChecked names the store checks that are run again through each
// extension: every check of the store's own behaviour.
var extensionChecked = map[string]bool{
	"StoreVersions": true, "StoreContract": true, "StoreErrorsAreNotLostRaces": true, "StoreKeys": true,
	"StoreBuffers": true, "StoreLiveKeyFound": true, "StoreTTL": true, "StoreExpiredVersionLoses": true,
	"StoreAtomicityProbe": true,
}

// extension is one optional interface: how to see a store through it.
type extension struct {
	name string
	// through returns s seen through the extension, or false when s does
	// not implement it.
	through func(s cas.Store) (cas.Store, bool)
	// write performs one write through the extension.
	write func(s cas.Store, ctx context.Context, op *cas.Op) error
	// only are the checks of this extension alone.
	only []check
}

var extensions = []extension{
	{name: "Writer", through: func(s cas.Store) (cas.Store, bool) {
		w, ok := s.(cas.Writer)
		return writerStore{Store: s, w: w}, ok
	}, write: func(s cas.Store, ctx context.Context, op *cas.Op) error {
		return s.(cas.Writer).Write(ctx, op)
	}},
	{name: "Batcher", through: func(s cas.Store) (cas.Store, bool) {
		b, ok := s.(cas.Batcher)
		return batcherStore{Store: s, b: b}, ok
	}, write: func(s cas.Store, ctx context.Context, op *cas.Op) error {
		return batchOne(s.(cas.Batcher), ctx, op)
	}, only: []check{
		{name: "BatchOperations", run: checkBatchOps},
		{name: "BatchAtomicityProbe", background: true, run: checkBatchProbe},
	}},
}

// extensionChecks returns the checks of every extension, each named
// "Extension/Check". A check run on a store without the extension fails.
func extensionChecks() []check {
	var out []check
	for _, x := range extensions {
		var cs []check
		for _, c := range storeChecks {
			if extensionChecked[c.name] {
				cs = append(cs, through(x, c))
			}
		}
		cs = append(cs, check{name: "WriteReports", needs: "delete", run: func(e *env) { checkWriteReports(e, x) }})
		for _, c := range x.only {
			cs = append(cs, check{name: c.name, needs: c.needs, background: c.background, run: func(e *env) { c.run(e) }})
		}
		for _, c := range cs {
			run := c.run
			c.name = x.name + "/" + c.name
			c.run = func(e *env) {
				if _, ok := x.through(e.store); !ok {
					e.Fatalf("the store does not implement cas.%s", x.name)
				}
				run(e)
			}
			out = append(out, c)
		}
	}
	return out
}

// through runs c on the store seen through x.
func through(x extension, c check) check {
	run := c.run
	c.run = func(e *env) {
		s, _ := x.through(e.store)
		e.store = s
		run(e)
	}
	return c
}

// offered returns the extensions s implements.
func offered(s cas.Store) []string {
	var names []string
	for _, x := range extensions {
		if _, ok := x.through(s); ok {
			names = append(names, x.name)
		}
	}
	return names
}

// writerStore is a store whose Insert and Replace go through its Writer.
type writerStore struct {
	cas.Store
	w cas.Writer
}

func (s writerStore) CheckKey(key string) error { return checkKey(s.Store, key) }

func (s writerStore) Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (bool, error) {
	op := &cas.Op{Kind: cas.OpInsert, Key: key, Data: data, TTL: ttl}
	if err := s.w.Write(ctx, op); err != nil {
		return false, err
	}
	return op.Result.Written, nil
}

func (s writerStore) Replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	op := &cas.Op{Kind: cas.OpReplace, Key: key, Data: data, Ver: ver, TTL: ttl}
	if err := s.w.Write(ctx, op); err != nil {
		return false, err
	}
	return op.Result.Written, nil
}

// batcherStore is a store whose Get, Insert and Replace are each a batch
// of one.
type batcherStore struct {
	cas.Store
	b cas.Batcher
}

func (s batcherStore) CheckKey(key string) error { return checkKey(s.Store, key) }

func batchOne(b cas.Batcher, ctx context.Context, op *cas.Op) error {
	ops := [1]*cas.Op{op}
	if err := b.Batch(ctx, ops[:]); err != nil {
		return err
	}
	return op.Result.Err
}

func (s batcherStore) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	op := &cas.Op{Kind: cas.OpGet, Key: key}
	if err := batchOne(s.b, ctx, op); err != nil {
		return nil, 0, false, err
	}
	return op.Result.Data, op.Result.Ver, op.Result.Found, nil
}

func (s batcherStore) Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (bool, error) {
	op := &cas.Op{Kind: cas.OpInsert, Key: key, Data: data, TTL: ttl}
	if err := batchOne(s.b, ctx, op); err != nil {
		return false, err
	}
	return op.Result.Written, nil
}

func (s batcherStore) Replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	op := &cas.Op{Kind: cas.OpReplace, Key: key, Data: data, Ver: ver, TTL: ttl}
	if err := batchOne(s.b, ctx, op); err != nil {
		return false, err
	}
	return op.Result.Written, nil
}

func checkKey(s cas.Store, key string) error {
	if kc, ok := s.(cas.KeyChecker); ok {
		return kc.CheckKey(key)
	}
	return nil
}

// reportRule is the promise of cas.Result in one line, for messages.
const reportRule = "the cas.Result rule: a write that was applied reports the version Get returns right after it (the executor's memory, cas.WithMemory, writes next with that version), and a lost race that reports the key's value (Current) reports exactly what Get returns, value and version"

// checkWriteReports writes through x and compares each outcome with what
// Get returns next: the versions a write reports, and the value a lost race
// reports as the winner.
func checkWriteReports(e *env, x extension) {
	s, ctx, k := e.store, e.ctx, e.key("reports")
	current := 0
	write := func(kind cas.OpKind, data []byte, ver cas.Version, what string) cas.Result {
		op := &cas.Op{Kind: kind, Key: k, Data: data, Ver: ver}
		if err := x.write(s, ctx, op); err != nil {
			e.Fatalf("%s: %v", what, err)
		}
		if op.Result.Current {
			current++
		}
		return op.Result
	}
	get := func(want []byte, what string) cas.Version {
		got, ver, found, err := s.Get(ctx, k)
		if err != nil || !found || !bytes.Equal(got, want) {
			e.Fatalf("Get %s: %x found=%v err=%v; want %x", what, got, found, err, want)
		}
		return ver
	}
	// won requires a write to have been applied, reporting the version Get
	// returns next; it returns that version.
	won := func(r cas.Result, data []byte, what string) cas.Version {
		if !r.Written {
			e.Fatalf("%s lost the race (Written=false); want it written", what)
		}
		if v := get(data, "after "+what); v != r.Ver {
			e.Fatalf("%s reported version %d for the bytes it wrote, but Get returns them with version %d: every write the executor then makes from memory loses. This breaks %s", what, r.Ver, v, reportRule)
		}
		return r.Ver
	}
	// lost requires a write to have lost; when it reports the winner, that
	// must be the key's value now.
	lost := func(r cas.Result, want []byte, wantVer cas.Version, found bool, what string) {
		if r.Written {
			e.Fatalf("%s was written; want a lost race", what)
		}
		if !r.Current {
			return
		}
		switch {
		case r.Found != found:
			e.Errorf("%s lost the race and reported the key found=%v; it is %v. This breaks %s", what, r.Found, found, reportRule)
		case found && (!bytes.Equal(r.Data, want) || r.Ver != wantVer):
			e.Errorf("%s lost the race and reported the winner as %x version %d, but the key holds %x version %d: the executor computes its next attempt from the value reported, so a stale one is written over newer state or loses forever. This breaks %s",
				what, head(r.Data), r.Ver, head(want), wantVer, reportRule)
		}
	}
	a, b, c, d := []byte{'A', 0}, []byte{'B', 0, 0}, []byte{'C'}, []byte{'D', 0}
	vA := won(write(cas.OpInsert, a, 0, "Insert of an absent key"), a, "Insert of an absent key")
	lost(write(cas.OpInsert, b, 0, "Insert of an existing key"), a, vA, true, "Insert of an existing key")
	vB := won(write(cas.OpReplace, b, vA, "Replace A→B"), b, "Replace A→B with the version Insert reported")
	lost(write(cas.OpReplace, c, vA, "Replace with A's version"), b, vB, true, "Replace with A's version (stale)")
	vC := won(write(cas.OpReplace, c, vB, "Replace B→C"), c, "Replace B→C with the version the last write reported")
	if err := s.Delete(ctx, k); err != nil {
		e.Fatalf("Delete: %v", err)
	}
	lost(write(cas.OpReplace, d, vC, "Replace of a deleted key"), nil, 0, false, "Replace of a deleted key")
	won(write(cas.OpInsert, d, 0, "Insert after Delete"), d, "Insert after Delete")
	if current > 0 {
		e.Logf("cas.%s reports the winner of a lost race (Current): a lost race costs the executor one round trip", x.name)
	} else {
		e.Logf("cas.%s does not report the winner of a lost race: the executor reads the key after one", x.name)
	}

	dead, cancel := context.WithCancel(context.Background())
	cancel()
	ver := get(d, "before a write with a cancelled context")
	op := &cas.Op{Kind: cas.OpReplace, Key: k, Data: a, Ver: ver}
	if err := x.write(s, dead, op); err == nil && !op.Result.Written {
		e.Errorf("a write through cas.%s with the right version and a cancelled context reported a lost race without an error: a failed call must be an error, or the executor retries an outage as contention", x.name)
	}
}

// invalidKey returns a key s refuses through its KeyChecker, or "" when it
// refuses none the kit tries.
func invalidKey(s cas.Store) string {
	for _, k := range []string{strings.Repeat("k", 1<<16), "\xff\xfe not UTF-8"} {
		if errors.Is(checkKey(s, k), core.ErrInvalidKey) {
			return k
		}
	}
	return ""
}

// checkBatchOps sends one batch of every kind of operation, on distinct
// keys, and checks each outcome against the store's state.
func checkBatchOps(e *env) {
	s, ctx := e.store, e.ctx
	b := s.(cas.Batcher)
	k := func(n int) string { return e.key("batch-" + strconv.Itoa(n)) }
	x, y, z := []byte{'X', 0}, []byte{'Y'}, []byte{'Z', 0, 0}
	for i, v := range [][]byte{x, y, z} {
		if ok, err := s.Insert(ctx, k(3+i), v, 0); err != nil || !ok {
			e.Fatalf("Insert: ok=%v err=%v", ok, err)
		}
	}
	_, vy, _, err := s.Get(ctx, k(4))
	if err != nil {
		e.Fatalf("Get: %v", err)
	}
	_, vz, _, err := s.Get(ctx, k(5))
	if err != nil {
		e.Fatalf("Get: %v", err)
	}
	if ok, err := s.Replace(ctx, k(5), z, vz, 0); err != nil || !ok { // vz is stale now
		e.Fatalf("Replace: ok=%v err=%v", ok, err)
	}
	_, vz2, _, _ := s.Get(ctx, k(5))
	if vz2 == vz {
		z = append(z, 1) // a digest version: make the bytes differ
		if ok, err := s.Replace(ctx, k(5), z, vz2, 0); err != nil || !ok {
			e.Fatalf("Replace: ok=%v err=%v", ok, err)
		}
		_, vz2, _, _ = s.Get(ctx, k(5))
	}
	a, bb := []byte{'A', 0}, []byte{'B', 0}
	ops := []*cas.Op{
		{Kind: cas.OpGet, Key: k(1)},                        // absent
		{Kind: cas.OpInsert, Key: k(2), Data: a},            // absent: written
		{Kind: cas.OpInsert, Key: k(3), Data: a},            // exists: lost
		{Kind: cas.OpReplace, Key: k(4), Data: bb, Ver: vy}, // current version: written
		{Kind: cas.OpReplace, Key: k(5), Data: bb, Ver: vz}, // stale: lost
		{Kind: cas.OpGet, Key: k(3)},                        // X
	}
	bad := invalidKey(s)
	if bad != "" {
		ops = append(ops, &cas.Op{Kind: cas.OpInsert, Key: bad, Data: a})
	}
	if err := b.Batch(ctx, ops); err != nil {
		e.Fatalf("a batch of %d operations on distinct keys failed as a whole: %v", len(ops), err)
	}
	for i, op := range ops[:6] {
		if op.Result.Err != nil {
			e.Fatalf("operation %d of the batch (%s, on a key of its own): %v", i, kindName(op.Kind), op.Result.Err)
		}
	}
	want := []struct {
		written, found bool
		data           []byte
	}{
		{false, false, nil}, {true, false, nil}, {false, true, x}, {true, false, nil}, {false, true, z}, {false, true, x},
	}
	names := []string{"Get of an absent key", "Insert of an absent key", "Insert of an existing key",
		"Replace with the current version", "Replace with a stale version", "Get of an existing key"}
	for i, w := range want {
		r := ops[i].Result
		if r.Written != w.written {
			e.Errorf("in a batch, %s reported Written=%v, want %v: each operation's result must be its own (in the order of the batch)", names[i], r.Written, w.written)
			continue
		}
		isGet := ops[i].Kind == cas.OpGet
		if (isGet || r.Current) && (r.Found != w.found || !bytes.Equal(r.Data, w.data)) {
			e.Errorf("in a batch, %s reported found=%v value %x, want found=%v value %x: each operation's result must be its own", names[i], r.Found, head(r.Data), w.found, head(w.data))
		}
	}
	for i, want := range []struct {
		data []byte
		ver  cas.Version
	}{{nil, 0}, {a, ops[1].Result.Ver}, {x, 0}, {bb, ops[3].Result.Ver}, {z, vz2}} {
		got, ver, found, err := s.Get(ctx, k(i+1))
		switch {
		case err != nil:
			e.Fatalf("Get after the batch: %v", err)
		case found != (want.data != nil) || !bytes.Equal(got, want.data):
			e.Errorf("after the batch, key %d holds %x (found=%v), want %x: an operation of the batch was applied to the wrong key, or not at all", i+1, head(got), found, head(want.data))
		case want.ver != 0 && ver != want.ver:
			e.Errorf("after the batch, key %d has version %d, but its write in the batch reported %d. This breaks %s", i+1, ver, want.ver, reportRule)
		}
	}
	if bad != "" {
		if err := ops[6].Result.Err; !errors.Is(err, core.ErrInvalidKey) {
			e.Errorf("in a batch, an Insert of a key the store refuses (CheckKey says so) reported %v (Written=%v); want its own error wrapping core.ErrInvalidKey, the other operations unharmed", err, ops[6].Result.Written)
		}
	}

	dead, cancel := context.WithCancel(context.Background())
	cancel()
	_, v4, _, _ := s.Get(ctx, k(4))
	ops = []*cas.Op{{Kind: cas.OpReplace, Key: k(4), Data: a, Ver: v4}, {Kind: cas.OpInsert, Key: k(6), Data: a}, {Kind: cas.OpGet, Key: k(2)}}
	if err := b.Batch(dead, ops); err == nil {
		for i, op := range ops {
			r := op.Result
			if r.Err == nil && ((op.Kind != cas.OpGet && !r.Written) || (op.Kind == cas.OpGet && !r.Found)) {
				e.Errorf("a batch with a cancelled context reported operation %d (%s) as a lost race or an absent key without an error: a failed call must be an error (the whole batch's, or the operation's), never a lost race", i, kindName(op.Kind))
			}
		}
	}
}

// checkBatchProbe is the atomicity probe through batches: workers each add
// 1 to every one of several counters per round, reading all in one batch
// and writing all in the next; a counter whose write lost is tried again
// in the worker's next round. Every counter must end at its acknowledged
// increments.
func checkBatchProbe(e *env) {
	const counters = 4
	workers, rounds := e.cfg.probeWorkers, max(1, e.cfg.probeEach/counters)
	s, ctx := e.store, e.ctx
	b := s.(cas.Batcher)
	keys := make([]string, counters)
	for i := range keys {
		keys[i] = e.key("batch-probe-" + strconv.Itoa(i))
	}
	var acked, writeErrs [counters]atomic.Int64
	var failures atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	deadline := time.Now().Add(30 * time.Second)
	for range workers {
		wg.Go(func() {
			for range rounds {
				if time.Now().After(deadline) || ctx.Err() != nil {
					return
				}
				reads := make([]*cas.Op, counters)
				for i, k := range keys {
					reads[i] = &cas.Op{Kind: cas.OpGet, Key: k}
				}
				if err := b.Batch(ctx, reads); err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				var writes []*cas.Op
				var which []int
				for i, r := range reads {
					if r.Result.Err != nil {
						continue
					}
					op := &cas.Op{Kind: cas.OpInsert, Key: keys[i], Data: []byte("1")}
					if r.Result.Found {
						n, err := strconv.Atoi(string(r.Result.Data))
						if err != nil {
							firstErr.CompareAndSwap(nil, fmt.Errorf("counter corrupted: %q", r.Result.Data))
							failures.Add(1)
							continue
						}
						op = &cas.Op{Kind: cas.OpReplace, Key: keys[i], Data: []byte(strconv.Itoa(n + 1)), Ver: r.Result.Ver}
					}
					writes, which = append(writes, op), append(which, i)
				}
				runtime.Gosched() // let other writers in between, as network latency would
				if err := b.Batch(ctx, writes); err != nil {
					for _, i := range which {
						writeErrs[i].Add(1)
					}
					continue
				}
				for j, op := range writes {
					switch {
					case op.Result.Err != nil:
						writeErrs[which[j]].Add(1)
					case op.Result.Written:
						acked[which[j]].Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := failures.Load(); n > int64(workers*rounds/10) {
		e.Fatalf("batch probe: %d batches failed (first: %v)", n, firstErr.Load())
	}
	total := 0
	for i, k := range keys {
		data, _, found, err := s.Get(ctx, k)
		if err != nil {
			e.Fatalf("Get: %v", err)
		}
		got := 0
		if found {
			got, _ = strconv.Atoi(string(data))
		}
		want, errs := int(acked[i].Load()), int(writeErrs[i].Load())
		total += want
		switch {
		case got < want:
			e.Errorf("batch probe: counter %d acknowledged %d increments through batched compare-and-swaps but ended at %d, %d lost: an operation of a batch did not compare its version atomically with its write (or a batch's results were handed to the wrong operations)", i, want, got, want-got)
		case got > want+errs:
			e.Errorf("batch probe: counter %d ended at %d, above its %d acknowledged increments and %d failed writes: writes of a batch reported a lost race although applied", i, got, want, errs)
		}
	}
	e.Logf("batch probe: %d workers, %d rounds of %d counters: %d increments acknowledged", workers, rounds, counters, total)
	if total == 0 {
		e.Errorf("batch probe: no batched write succeeded")
	}
}

func kindName(k cas.OpKind) string {
	switch k {
	case cas.OpGet:
		return "Get"
	case cas.OpInsert:
		return "Insert"
	case cas.OpReplace:
		return "Replace"
	}
	return "operation " + strconv.Itoa(int(k))
}
