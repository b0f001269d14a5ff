package couchbase_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
)

// incrResults tallies an incrementer's calls.
type incrResults struct {
	ok         int           // increments applied and acknowledged
	lost       int           // lost races (impossible with one writer)
	errs       int           // increments that failed with an error
	writeErrs  int           // of those, failed writes (maybe applied)
	slowestErr time.Duration // longest time a failing call took
	lastErr    error
}

// incrementer increments a decimal counter through the SPI in a loop, one
// call per context of opTimeout.
type incrementer struct {
	mu   sync.Mutex
	r    incrResults
	done chan struct{}
	wg   sync.WaitGroup
}

func startIncrementer(s cas.Store, key string, opTimeout time.Duration) *incrementer {
	w := &incrementer{done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-w.done:
				return
			default:
			}
			w.once(s, key, opTimeout)
		}
	}()
	return w
}

func (w *incrementer) once(s cas.Store, key string, opTimeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	began := time.Now()
	fail := func(err error, write bool) {
		took := time.Since(began)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.r.errs++
		if write {
			w.r.writeErrs++
		}
		w.r.slowestErr = max(w.r.slowestErr, took)
		w.r.lastErr = err
		// Do not spin on a dead server.
		time.Sleep(10 * time.Millisecond)
	}
	data, ver, found, err := s.Get(ctx, key)
	if err != nil {
		fail(err, false)
		return
	}
	var ok bool
	if !found {
		ok, err = s.Insert(ctx, key, []byte("1"), 0)
	} else {
		n, perr := strconv.Atoi(string(data))
		if perr != nil {
			fail(perr, false)
			return
		}
		ok, err = s.Replace(ctx, key, []byte(strconv.Itoa(n+1)), ver, 0)
	}
	if err != nil {
		fail(err, true)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ok {
		w.r.ok++
	} else {
		w.r.lost++
	}
}

func (w *incrementer) results() incrResults {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.r
}

// waitFor waits up to 20 s for cond.
func (w *incrementer) waitFor(t *testing.T, cond func(incrResults) bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond(w.results()) {
			return
		}
	}
	r := w.results()
	t.Fatalf("no %s within 20 s: %+v", what, r)
}

func (w *incrementer) stop() incrResults {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	w.wg.Wait()
	return w.results()
}

// checkOutcome asserts what an outage may and may not do: no lost race with
// a single writer, every failure within the timeout (plus scheduling slack),
// and a final counter that counts every acknowledged increment and at most
// the failed writes besides (a write can be applied and its reply lost).
func checkOutcome(t *testing.T, s cas.Store, key string, r incrResults, opTimeout time.Duration) {
	t.Helper()
	t.Logf("ok=%d lost=%d errors=%d (writes %d), slowest failure %v, last error: %v",
		r.ok, r.lost, r.errs, r.writeErrs, r.slowestErr.Round(time.Millisecond), r.lastErr)
	if r.lost != 0 {
		t.Errorf("%d failures were reported as lost races", r.lost)
	}
	if slack := 2 * time.Second; r.slowestErr > opTimeout+slack { // slack for a loaded CI machine
		t.Errorf("a failing call took %v, beyond its %v timeout", r.slowestErr, opTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	data, _, found, err := s.Get(ctx, key)
	if err != nil || !found {
		t.Fatalf("after the outage: found=%v err=%v", found, err)
	}
	n, err := strconv.Atoi(string(data))
	if err != nil {
		t.Fatalf("counter corrupted: %q", data)
	}
	if n < r.ok || n > r.ok+r.writeErrs {
		t.Errorf("counter = %d, want between %d acknowledged increments and %d (+ failed writes)", n, r.ok, r.ok+r.writeErrs)
	}
}
