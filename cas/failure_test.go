package cas_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/internal/harness/storetest"
	"github.com/bucketgrid/bucketgrid/retry"
)

// faultyStore is a counted memstore whose Get, for one key, can panic, hang
// until its context ends, or wait at a gate.
type faultyStore struct {
	*storetest.Counting
	key  string
	mode atomic.Value // "", "panic", "hang", "gate"
	gate chan struct{}
	gets atomic.Int64 // Gets of key
}

func newFaulty(key string) *faultyStore {
	s := &faultyStore{Counting: &storetest.Counting{Store: memstore.New()}, key: key}
	s.mode.Store("")
	return s
}

func (s *faultyStore) Get(ctx context.Context, k string) ([]byte, cas.Version, bool, error) {
	if k == s.key {
		s.gets.Add(1)
		switch s.mode.Load() {
		case "panic":
			panic("boom")
		case "hang":
			<-ctx.Done()
			return nil, 0, false, ctx.Err()
		case "gate":
			select {
			case <-s.gate:
			case <-ctx.Done():
				return nil, 0, false, ctx.Err()
			}
		}
	}
	return s.Counting.Get(ctx, k)
}

var createReq = func() wire.Request {
	c, _ := core.NewConfig(core.Greedy(10, 1, time.Hour))
	return wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &c, Ops: []wire.Op{{Kind: wire.OpTryConsume, Tokens: 1}}}
}()

// waitUntil polls cond every millisecond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// recovered runs f and returns what it panicked with, or nil.
func recovered(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// servedPromptly runs one request on key and fails unless it succeeds well
// within 10 s: a key left stuck by a panic waits until its deadline.
func servedPromptly(t *testing.T, e *cas.Executor, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.Execute(ctx, key, createReq)
	if err != nil || resp.Status != wire.StatusOK {
		t.Fatalf("the next request on %q: status %v err %v: the key is stuck", key, resp.Status, err)
	}
}

// TestPanicDoesNotStickKey: a panic in the store propagates to the caller
// and the key is served again at once (it used to stay queued for good).
func TestPanicDoesNotStickKey(t *testing.T) {
	s := newFaulty("boom")
	e := cas.New(s)
	s.mode.Store("panic")
	v := recovered(func() { e.Execute(context.Background(), "boom", createReq) })
	if v != "boom" {
		t.Fatalf("Execute panicked with %v, want the store's panic", v)
	}
	s.mode.Store("")
	servedPromptly(t, e, "boom")
}

// TestPanicInCoalescedRound: a round of several requests runs on its own
// goroutine; its panic reaches every caller of the round, on the caller's
// goroutine, as a *PanicError, and the key is not stuck.
func TestPanicInCoalescedRound(t *testing.T) {
	s := newFaulty("boom")
	e := cas.New(s)
	bg := context.Background()
	if _, err := e.Execute(bg, "boom", createReq); err != nil {
		t.Fatal(err)
	}
	s.gate = make(chan struct{})
	s.mode.Store("gate")
	leader := make(chan error, 1)
	go func() { _, err := e.Execute(bg, "boom", createReq); leader <- err }()
	waitUntil(t, "the leader waits at the gate", func() bool { return s.gets.Load() == 2 })
	panics := make(chan any, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			panics <- recovered(func() {
				if _, err := e.Execute(ctx, "boom", createReq); err != nil {
					panic(err) // not the panic under test: reported below
				}
			})
		}()
	}
	waitUntil(t, "two requests queue", func() bool { return e.Stats().Requests == 4 })
	s.mode.Store("panic") // the next Get, the queued pair's, panics
	close(s.gate)
	if err := <-leader; err != nil {
		t.Fatalf("leader: %v", err)
	}
	for range 2 {
		v := <-panics
		p, ok := v.(*cas.PanicError)
		if !ok || p.Value != "boom" || !strings.Contains(string(p.Stack), "faultyStore") {
			t.Fatalf("caller of the panicking round got %#v, want a *cas.PanicError with the store's value and stack", v)
		}
	}
	s.mode.Store("")
	servedPromptly(t, e, "boom")
}

// TestOwnDeadlineWinsInCoalescedRound: a caller that leads a round with
// others returns when its own context ends, while the store hangs and the
// others' contexts go on (it used to wait for the last of them).
func TestOwnDeadlineWinsInCoalescedRound(t *testing.T) {
	s := newFaulty("slow")
	e := cas.New(s)
	bg := context.Background()
	if _, err := e.Execute(bg, "slow", createReq); err != nil {
		t.Fatal(err)
	}
	s.mode.Store("hang")
	type result struct{ err error }
	start := func(ctx context.Context) chan result {
		ch := make(chan result, 1)
		go func() { _, err := e.Execute(ctx, "slow", createReq); ch <- result{err} }()
		return ch
	}
	ctxA, cancelA := context.WithCancel(bg)
	a := start(ctxA)
	waitUntil(t, "A's round reads", func() bool { return s.gets.Load() == 2 })
	ctxB, cancelB := context.WithCancel(bg)
	b := start(ctxB)
	waitUntil(t, "B queues", func() bool { return e.Stats().Requests == 3 })
	ctxC, cancelC := context.WithCancel(bg)
	defer cancelC()
	c := start(ctxC)
	waitUntil(t, "C queues after B", func() bool { return e.Stats().Requests == 4 })
	cancelA() // A's round ends; B leads the round of B and C, which hangs
	if r := <-a; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("A: %v", r.err)
	}
	waitUntil(t, "the round of B and C reads", func() bool { return s.gets.Load() == 3 })
	cancelB()
	select {
	case r := <-b:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("B: %v, want its own context's error", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("B, leading a round with C, was held past its own context while C's goes on")
	}
	select {
	case r := <-c:
		t.Fatalf("C returned %v while its context is alive and the store hangs", r.err)
	default:
	}
	cancelC()
	if r := <-c; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("C: %v", r.err)
	}
	s.mode.Store("")
	servedPromptly(t, e, "slow")
}

// TestVerboseCoalescedOwnDiagnostics: verbose requests coalesced into one
// round each get the diagnostics of their own step (two probes used to say
// 7 remaining with diagnostics saying 6).
func TestVerboseCoalescedOwnDiagnostics(t *testing.T) {
	s := newFaulty("v")
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	e := cas.New(s, cas.WithClock(clk))
	cfg, _ := core.NewConfig(core.Greedy(10, 1, time.Hour))
	h := bucketgrid.NewManager(e).Bucket("v", func(context.Context) (core.Config, error) { return cfg, nil })
	bg := context.Background()
	if _, err := h.TryConsume(bg, 1); err != nil { // create: 9 left
		t.Fatal(err)
	}
	s.gate = make(chan struct{})
	s.mode.Store("gate")
	type probe struct {
		remaining, available int64
		err                  error
	}
	probes := make(chan probe, 3)
	verbose := func() {
		v, err := h.TryConsumeAndReturnRemainingVerbose(bg, 1)
		if err != nil {
			probes <- probe{err: err}
			return
		}
		probes <- probe{v.Probe.Remaining, v.Diagnostics.Available[0], nil}
	}
	go verbose()
	waitUntil(t, "the first probe waits at the gate", func() bool { return s.gets.Load() == 3 })
	rounds := e.Stats().Rounds
	go verbose()
	go verbose()
	waitUntil(t, "two probes queue", func() bool { return e.Stats().Requests == 5 })
	close(s.gate)
	seen := map[int64]bool{}
	for range 3 {
		p := <-probes
		if p.err != nil {
			t.Fatal(p.err)
		}
		if p.remaining != p.available {
			t.Errorf("probe says %d remaining, its diagnostics %d", p.remaining, p.available)
		}
		seen[p.remaining] = true
	}
	if !seen[8] || !seen[7] || !seen[6] {
		t.Errorf("remaining values %v, want 8, 7 and 6", seen)
	}
	if r := e.Stats().Rounds - rounds; r != 1 {
		t.Errorf("the two queued probes took %d rounds, want 1 (coalesced)", r)
	}
}

// ruleStore refuses keys longer than 8 bytes through CheckKey, and in Get
// (the only method these tests reach with such a key) before its map.
type ruleStore struct {
	*faultyStore
}

func (s ruleStore) CheckKey(key string) error {
	if len(key) > 8 {
		return core.InvalidKey(key, "longer than 8 bytes")
	}
	return nil
}

func (s ruleStore) Get(ctx context.Context, k string) ([]byte, cas.Version, bool, error) {
	if err := s.CheckKey(k); err != nil {
		return nil, 0, false, err
	}
	return s.faultyStore.Get(ctx, k)
}

// hidingStore hides its store's CheckKey, as a careless wrapper would.
type hidingStore struct{ cas.Store }

// TestInvalidKeyIsNotAStoreFailure: a key the store cannot hold comes back
// as the store's error, unwrapped, before any store call when the store
// implements KeyChecker, never retried and never counted as a store failure.
func TestInvalidKeyIsNotAStoreFailure(t *testing.T) {
	const long = "longer-than-8"
	for _, tt := range []struct {
		name string
		wrap func(ruleStore) cas.Store
	}{
		{"KeyChecker", func(s ruleStore) cas.Store { return s }},
		{"hidden KeyChecker", func(s ruleStore) cas.Store { return hidingStore{s} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := ruleStore{newFaulty("")}
			e := cas.New(tt.wrap(rs), cas.WithRetry(retry.Immediate(5)))
			_, err := e.Execute(context.Background(), long, createReq)
			if !errors.Is(err, core.ErrInvalidKey) || errors.Is(err, cas.ErrStore) {
				t.Fatalf("err = %v, want ErrInvalidKey, not ErrStore", err)
			}
			if strings.Contains(err.Error(), long) {
				t.Fatalf("error %q shows the key", err)
			}
			if n := rs.Calls(); n != 0 {
				t.Errorf("%d store calls reached the map, want none", n)
			}
			if s := e.Stats(); s.StoreErrors != 0 || s.InvalidKeys != 1 || s.Attempts > 1 {
				t.Errorf("stats %+v: want no store error, one invalid key, no retry", s)
			}
			if tt.name == "KeyChecker" {
				if err := e.Remove(context.Background(), long); !errors.Is(err, core.ErrInvalidKey) || rs.Calls() != 0 {
					t.Errorf("Remove: %v after %d calls", err, rs.Calls())
				}
			}
		})
	}
}

// TestConflictAtDeadline: when the next retry would start past the
// deadline, the executor gives up at once with ErrConflict (the key is
// contended, the store is fine), which also says the deadline won.
func TestConflictAtDeadline(t *testing.T) {
	st := &conflictStore{Store: memstore.New(), lose: 1 << 30}
	e := cas.New(st, cas.WithRetry(retry.Func(func(retry.Metadata) retry.Decision {
		return retry.Decision{Action: retry.RetryAfter, Delay: time.Hour}
	})))
	if _, err := e.Execute(context.Background(), "k", createReq); err != nil { // Insert: not a lost race
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := e.Execute(ctx, "k", createReq)
	if !errors.Is(err, cas.ErrConflict) || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("err = %v (ctx %v), want ErrConflict and DeadlineExceeded before the deadline", err, ctx.Err())
	}
}
