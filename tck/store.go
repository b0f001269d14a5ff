package tck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/retry"
)

var storeChecks = []check{
	{name: "StoreContract", needs: "delete", run: checkContract},
	{name: "StoreErrorsAreNotLostRaces", run: checkErrorsAreErrors},
	{name: "StoreTTL", needs: "ttl", run: checkTTL},
	{name: "StoreAtomicityProbe", run: checkProbe},
	{name: "InjectedConflicts", run: checkInjectedConflicts},
	{name: "InjectedStoreErrors", run: checkInjectedErrors},
	{name: "ContextDeadlineWins", run: checkDeadlineWins},
	{name: "ClockSkew", run: checkClockSkew},
	{name: "TTLFollowsStrategy", run: checkTTLFollowsStrategy},
}

func generousBackoff() retry.Strategy {
	return retry.Backoff(retry.BackoffConfig{Budget: 10 * time.Second})
}

func checkContract(e *env) {
	s, ctx, k := e.store, e.ctx, e.key("contract")
	must := func(what string, err error) {
		if err != nil {
			e.Fatalf("%s: unexpected error: %v", what, err)
		}
	}
	if _, _, found, err := s.Get(ctx, k); err != nil || found {
		e.Fatalf("Get of an absent key = found %v, err %v; want found=false, err=nil", found, err)
	}
	val := []byte{0, 1, 2, 0xff, 0, 'x'} // binary, with zero bytes
	ok, err := s.Insert(ctx, k, val, 0)
	must("Insert of an absent key", err)
	if !ok {
		e.Fatalf("Insert of an absent key reported a lost race")
	}
	ok, err = s.Insert(ctx, k, []byte("second"), 0)
	must("second Insert", err)
	if ok {
		e.Errorf("Insert of an existing key succeeded: Insert must write only when the key is absent (use a create-if-absent primitive, not an upsert)")
	}
	got, v1, found, err := s.Get(ctx, k)
	must("Get", err)
	if !found || !bytes.Equal(got, val) {
		e.Fatalf("Get after Insert = %x (found %v), want %x: values must round-trip byte for byte", got, found, val)
	}
	got[0] = 'M' // the caller owns what Get returns
	if again, _, _, _ := s.Get(ctx, k); !bytes.Equal(again, val) {
		e.Errorf("mutating the slice Get returned changed the stored value: Get must return a copy")
	}
	big := bytes.Repeat([]byte{0xab}, 4096)
	ok, err = s.Replace(ctx, k, big, v1, 0)
	must("Replace with the current version", err)
	if !ok {
		e.Fatalf("Replace with the version Get returned reported a lost race")
	}
	got, v2, _, err := s.Get(ctx, k)
	must("Get after Replace", err)
	if !bytes.Equal(got, big) {
		e.Errorf("Get after Replace returned %d bytes, want the 4096 written", len(got))
	}
	if v2 == v1 {
		e.Errorf("Replace did not change the version (still %d): every write must produce a new version", v1)
	}
	ok, err = s.Replace(ctx, k, []byte("stale"), v1, 0)
	must("Replace with a stale version", err)
	if ok {
		e.Errorf("Replace with a stale version succeeded: Replace must compare the version and write only when it is unchanged (a lost race must be reported as ok=false)")
	}
	if got, _, _, _ := s.Get(ctx, k); !bytes.Equal(got, big) {
		e.Errorf("a refused Replace changed the stored value")
	}
	must("Delete", s.Delete(ctx, k))
	if _, _, found, err := s.Get(ctx, k); err != nil || found {
		e.Errorf("Get after Delete = found %v, err %v; want absent", found, err)
	}
	ok, err = s.Replace(ctx, k, []byte("ghost"), v2, 0)
	must("Replace of a deleted key", err)
	if ok {
		e.Errorf("Replace of a deleted key succeeded: it must be a lost race, or a deleted bucket comes back")
	}
	must("Delete of an absent key", s.Delete(ctx, k))
	ok, err = s.Insert(ctx, k, val, 0)
	must("Insert after Delete", err)
	if !ok {
		e.Errorf("Insert after Delete reported a lost race")
	}
}

// checkErrorsAreErrors calls the store with a context that has already
// ended: a correct store returns an error or completes the call; it never
// reports the failure as a lost race (Bucket4j's MongoDB backend did).
func checkErrorsAreErrors(e *env) {
	s, k := e.store, e.key("errors")
	if ok, err := s.Insert(e.ctx, k, []byte("v"), 0); err != nil || !ok {
		e.Fatalf("Insert: ok=%v err=%v", ok, err)
	}
	_, ver, _, err := s.Get(e.ctx, k)
	if err != nil {
		e.Fatalf("Get: %v", err)
	}
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	if ok, err := s.Replace(dead, k, []byte("w"), ver, 0); !ok && err == nil {
		e.Errorf("Replace with the right version and a cancelled context returned ok=false, err=nil: a failed call is reported as a lost race, so the executor would retry an outage forever. Return the error")
	}
	if ok, err := s.Insert(dead, e.key("errors-absent"), []byte("v"), 0); !ok && err == nil {
		e.Errorf("Insert of an absent key with a cancelled context returned ok=false, err=nil: a failed call is reported as a lost race. Return the error")
	}
	if _, _, found, err := s.Get(dead, k); !found && err == nil {
		e.Errorf("Get of an existing key with a cancelled context reported the key absent without an error: a failed read must be an error, or buckets are silently re-created full")
	}
}

func checkTTL(e *env) {
	s, ctx, ttl := e.store, e.ctx, e.cfg.ttl
	a, b, c := e.key("ttl-a"), e.key("ttl-b"), e.key("ttl-c")
	for _, k := range []string{a, b} {
		if ok, err := s.Insert(ctx, k, []byte("v"), ttl); err != nil || !ok {
			e.Fatalf("Insert with TTL %v: ok=%v err=%v", ttl, ok, err)
		}
	}
	if ok, err := s.Insert(ctx, c, []byte("v"), 0); err != nil || !ok {
		e.Fatalf("Insert without TTL: ok=%v err=%v", ok, err)
	}
	_, vb, found, err := s.Get(ctx, b)
	if err != nil || !found {
		e.Fatalf("Get right after an Insert with TTL %v: found=%v err=%v", ttl, found, err)
	}
	if ok, err := s.Replace(ctx, b, []byte("w"), vb, 0); err != nil || !ok {
		e.Fatalf("Replace with TTL 0: ok=%v err=%v", ok, err)
	}
	deadline := time.Now().Add(5*ttl + 3*time.Second)
	for {
		_, _, found, err := s.Get(ctx, a)
		if err != nil {
			e.Fatalf("Get while waiting for expiry: %v", err)
		}
		if !found {
			break
		}
		if time.Now().After(deadline) {
			e.Fatalf("a value written with TTL %v was still there after %v: the store ignores TTLs, so idle buckets are never cleaned up", ttl, 5*ttl+3*time.Second)
		}
		time.Sleep(ttl / 4)
	}
	if _, _, found, err := s.Get(ctx, b); err != nil || !found {
		e.Errorf("a value replaced with TTL 0 expired (found=%v err=%v): every write sets the TTL anew, and 0 means none", found, err)
	}
	if _, _, found, err := s.Get(ctx, c); err != nil || !found {
		e.Errorf("a value inserted with TTL 0 is gone (found=%v err=%v)", found, err)
	}
	if ok, err := s.Insert(ctx, a, []byte("again"), 0); err != nil || !ok {
		e.Errorf("Insert over an expired key: ok=%v err=%v; an expired key must count as absent", ok, err)
	}
}

// ProbeResult is the outcome of AtomicityProbe: Got < Want means writes were
// lost (a Replace that did not really compare, or a dropped write).
type ProbeResult struct {
	Want, Got int
}

// Lost returns the number of lost increments.
func (r ProbeResult) Lost() int { return r.Want - r.Got }

// AtomicityProbe has workers goroutines each add 1, each times, to a decimal
// counter at key through the store SPI alone (Get, then Insert or Replace,
// retrying lost races), and returns the expected and the final count. It
// detects stores whose compare-and-swap is not atomic under concurrent
// connections.
func AtomicityProbe(ctx context.Context, s cas.Store, key string, workers, each int) (ProbeResult, error) {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := increment(ctx, s, key); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return ProbeResult{}, err
	}
	data, _, found, err := s.Get(ctx, key)
	if err != nil {
		return ProbeResult{}, err
	}
	got := 0
	if found {
		if got, err = strconv.Atoi(string(data)); err != nil {
			return ProbeResult{}, fmt.Errorf("tck: probe counter corrupted: %q", data)
		}
	}
	return ProbeResult{Want: workers * each, Got: got}, nil
}

func increment(ctx context.Context, s cas.Store, key string) error {
	for {
		ok, _, err := incrementOnce(ctx, s, key)
		if err != nil || ok {
			return err
		}
	}
}

// incrementOnce makes one attempt to add 1 to the decimal counter at key:
// read, then insert or replace. ok=false with no error is a lost race;
// inWrite says whether an error came from the write (which may have been
// applied).
func incrementOnce(ctx context.Context, s cas.Store, key string) (ok, inWrite bool, err error) {
	data, ver, found, err := s.Get(ctx, key)
	if err != nil {
		return false, false, err
	}
	runtime.Gosched() // let other writers in between, as network latency would
	if !found {
		ok, err = s.Insert(ctx, key, []byte("1"), 0)
		return ok, err != nil, err
	}
	n, err := strconv.Atoi(string(data))
	if err != nil {
		return false, false, fmt.Errorf("tck: counter corrupted: %q", data)
	}
	ok, err = s.Replace(ctx, key, []byte(strconv.Itoa(n+1)), ver, 0)
	return ok, err != nil, err
}

func checkProbe(e *env) {
	r, err := AtomicityProbe(e.ctx, e.store, e.key("probe"), e.cfg.probeWorkers, e.cfg.probeEach)
	if err != nil {
		e.Fatalf("atomicity probe: %v", err)
	}
	if r.Lost() != 0 {
		e.Errorf("atomicity probe: %d concurrent increments through Get+Replace ended at %d, %d lost: Replace is not an atomic compare-and-swap under concurrency (or writes are dropped)", r.Want, r.Got, r.Lost())
	}
}

// errInjected is the failure the kit injects.
var errInjected = errors.New("tck: injected store failure")
