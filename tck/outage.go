package tck

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
)

// Outage is a tool for a backend's outage test, which the kit cannot run
// itself since only the backend's test knows how to stop its server: start a
// load, break the server (kill, freeze, cut the network) while it runs,
// restore it, then check what the load saw.
//
//	o := tck.StartOutageLoad(store, "k", 300*time.Millisecond)
//	o.WaitFor(t, func(r tck.OutageResult) bool { return r.OK >= 20 }, "20 increments")
//	server.Kill()
//	o.WaitFor(t, func(r tck.OutageResult) bool { return r.Errors >= 5 }, "5 failures")
//	server.Restart()
//	…
//	tck.CheckOutage(t, store, "k", o.Stop(), 300*time.Millisecond)
//
// The load is one writer incrementing a decimal counter through the store
// SPI, one call per context of the given timeout.
type Outage struct {
	mu sync.Mutex
	r  OutageResult
	// unsettled counts the writes that failed since the last acknowledged
	// increment: their outcome is unknown, and one that the server applies
	// after the writer's next read makes that increment lose its race. An
	// acknowledged increment moves the version past them all, after which
	// none can apply.
	unsettled int
	done      chan struct{}
	wg        sync.WaitGroup
}

// OutageResult tallies the load's calls.
type OutageResult struct {
	OK          int           // increments applied and acknowledged
	Lost        int           // lost races no failed write explains: with one writer, failures misreported
	LateWrites  int           // lost races right after failed writes: such a write landed after the next read
	Errors      int           // increments that failed with an error
	WriteErrors int           // of those, failed writes (which may have been applied)
	SlowestErr  time.Duration // the longest a failing call took
	LastErr     error
}

// StartOutageLoad starts the load on key; stop it with Stop.
func StartOutageLoad(s cas.Store, key string, opTimeout time.Duration) *Outage {
	o := &Outage{done: make(chan struct{})}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		for {
			select {
			case <-o.done:
				return
			default:
			}
			o.once(s, key, opTimeout)
		}
	}()
	return o
}

func (o *Outage) once(s cas.Store, key string, opTimeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	began := time.Now()
	fail := func(err error, write bool) {
		o.mu.Lock()
		o.r.Errors++
		if write {
			o.r.WriteErrors++
			o.unsettled++
		}
		o.r.SlowestErr = max(o.r.SlowestErr, time.Since(began))
		o.r.LastErr = err
		o.mu.Unlock()
		time.Sleep(10 * time.Millisecond) // do not spin on a dead server
	}
	ok, inWrite, err := incrementOnce(ctx, s, key, nil)
	if err != nil {
		fail(err, inWrite)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case ok:
		o.r.OK++
		o.unsettled = 0
	case o.unsettled > 0:
		o.r.LateWrites++
		o.unsettled--
	default:
		o.r.Lost++
	}
}

// Result returns the tally so far.
func (o *Outage) Result() OutageResult {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.r
}

// WaitFor waits up to 20 s for cond to hold of the tally, failing t
// otherwise.
func (o *Outage) WaitFor(t testing.TB, cond func(OutageResult) bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond(o.Result()) {
			return
		}
	}
	t.Fatalf("no %s within 20 s: %+v", what, o.Result())
}

// Stop ends the load and returns the final tally. It may be called again.
func (o *Outage) Stop() OutageResult {
	select {
	case <-o.done:
	default:
		close(o.done)
	}
	o.wg.Wait()
	return o.Result()
}

// CheckOutage asserts what an outage may and may not do to a store: no
// failure reported as a lost race, every failing call back within its
// timeout (plus 2 s of scheduling slack for a loaded machine), and a final
// counter holding every acknowledged increment and at most the failed writes
// besides (a write can be applied and its reply lost).
func CheckOutage(t testing.TB, s cas.Store, key string, r OutageResult, opTimeout time.Duration) {
	t.Helper()
	t.Logf("ok=%d lost=%d late writes=%d errors=%d (writes %d), slowest failure %v, last error: %v",
		r.OK, r.Lost, r.LateWrites, r.Errors, r.WriteErrors, r.SlowestErr.Round(time.Millisecond), r.LastErr)
	if r.Lost != 0 {
		t.Errorf("%d failures were reported as lost races: return the error instead", r.Lost)
	}
	if r.SlowestErr > opTimeout+2*time.Second {
		t.Errorf("a failing call took %v, beyond its %v timeout: the store does not honour its context", r.SlowestErr, opTimeout)
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
	if n < r.OK || n > r.OK+r.WriteErrors {
		t.Errorf("counter = %d, want between the %d acknowledged increments and %d (+ failed writes)", n, r.OK, r.OK+r.WriteErrors)
	}
}
