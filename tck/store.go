package tck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
)

// storeChecks run against the store itself. StoreVersions comes first: the
// other checks lean on its rule.
var storeChecks = []check{
	{name: "StoreVersions", run: checkVersions},
	{name: "StoreContract", needs: "delete", run: checkContract},
	{name: "StoreErrorsAreNotLostRaces", run: checkErrorsAreErrors},
	{name: "StoreKeys", run: checkKeys},
	{name: "StoreBuffers", run: checkBuffers},
	{name: "StoreLiveKeyFound", background: true, run: checkLiveKeyFound},
	{name: "StoreTTL", needs: "ttl", background: true, run: checkTTL},
	{name: "StoreExpiredVersionLoses", needs: "ttl", background: true, run: checkExpiredVersionLoses},
	{name: "StoreAtomicityProbe", background: true, run: checkProbe},
	{name: "StoreSingleInsert", run: checkSingleInsert},
	{name: "InjectedConflicts", run: checkInjectedConflicts},
	{name: "InjectedStoreErrors", run: checkInjectedErrors},
	{name: "ContextDeadlineWins", run: checkDeadlineWins},
	{name: "ClockSkew", run: checkClockSkew},
	{name: "TTLFollowsStrategy", run: checkTTLFollowsStrategy},
	{name: "MemoryNeverDecides", run: checkMemoryNeverDecides},
	{name: "MemoryAfterExpiry", needs: "ttl", background: true, run: checkMemoryAfterExpiry},
	{name: "InstanceCount", needs: "ttl", background: true, run: checkInstanceCount},
}

// contractValue is binary, with zero bytes inside and at the end: a store
// that treats values as text or C strings (trimming trailing zeros, say)
// fails StoreContract on it instead of corrupting buckets later.
var contractValue = []byte{0, 1, 2, 0xff, 0, 'x', 0xc3, 0x28, 0, 0}

// mismatch describes how got differs from want, naming the usual culprits.
func mismatch(got, want []byte) string {
	switch {
	case len(got) < len(want) && bytes.Equal(got, want[:len(got)]) && allZero(want[len(got):]):
		return fmt.Sprintf("%d bytes, the %d written without their %d trailing zero bytes: the store trims values as text or C strings; store them as opaque binary",
			len(got), len(want), len(want)-len(got))
	case len(got) != len(want):
		return fmt.Sprintf("%d bytes where %d were written (got %x…, want %x…)", len(got), len(want), head(got), head(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("%d bytes as written, but byte %d is %#02x, want %#02x", len(got), i, got[i], want[i])
		}
	}
	return "the bytes written"
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func head(b []byte) []byte { return b[:min(len(b), 12)] }

func checkContract(e *env) {
	s, ctx, k := e.store, e.ctx, e.key("contract")
	must := func(what string, err error) {
		if err != nil {
			e.Fatalf("%s: unexpected error: %v", what, err)
		}
	}
	if _, _, found, err := s.Get(ctx, k); err != nil || found {
		e.Fatalf("Get of a key never written = found %v, err %v; want found=false, err=nil: an absent key is not an error, and never found", found, err)
	}
	val := contractValue
	ok, err := s.Insert(ctx, k, val, 0)
	must("Insert of an absent key", err)
	if !ok {
		e.Fatalf("Insert of an absent key reported a lost race (ok=false): Insert must write when the key is absent; a store whose inserts always lose can never create a bucket")
	}
	ok, err = s.Insert(ctx, k, []byte("second"), 0)
	must("second Insert", err)
	if ok {
		e.Errorf("Insert of an existing key succeeded: Insert must write only when the key is absent (use a create-if-absent primitive, not an upsert)")
	}
	got, v1, found, err := s.Get(ctx, k)
	must("Get", err)
	if !found {
		e.Fatalf("Get right after an Insert reported the key absent: a written key must be found")
	}
	if !bytes.Equal(got, val) {
		e.Fatalf("Get after Insert returned %s: values must round-trip byte for byte — store them as opaque binary, never as text", mismatch(got, val))
	}
	big := append(bytes.Repeat([]byte{0xab}, 4094), 0, 0)
	ok, err = s.Replace(ctx, k, big, v1, 0)
	must("Replace with the current version", err)
	if !ok {
		e.Fatalf("Replace with the version Get returned reported a lost race: Replace must write while the stored version is still the one read")
	}
	got, v2, _, err := s.Get(ctx, k)
	must("Get after Replace", err)
	if !bytes.Equal(got, big) {
		e.Errorf("Get after a Replace of 4096 bytes returned %s: values must round-trip byte for byte, whatever their size", mismatch(got, big))
	}
	if v2 == v1 {
		e.Errorf("Replace wrote new bytes but the version stayed %d: a version must change whenever the stored value changes (see cas.Version)", v1)
	}
	ok, err = s.Replace(ctx, k, []byte("stale"), v1, 0)
	must("Replace with a stale version", err)
	if ok {
		e.Errorf("Replace with a stale version succeeded: Replace must compare the version and write only when it is unchanged (a lost race must be reported as ok=false)")
	}
	if got, _, _, _ := s.Get(ctx, k); !bytes.Equal(got, big) {
		e.Errorf("a refused Replace changed the stored value: a lost race must write nothing")
	}
	must("Delete", s.Delete(ctx, k))
	if _, _, found, err := s.Get(ctx, k); err != nil || found {
		e.Errorf("Get after Delete = found %v, err %v; want absent: Delete must remove the key", found, err)
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
		e.Errorf("Insert after Delete reported a lost race: a deleted key is absent")
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
	if err := s.Delete(dead, k); err == nil {
		if _, _, found, err := s.Get(e.ctx, k); err != nil || found {
			e.Errorf("Delete with a cancelled context returned no error but the key is still there (found=%v, err=%v): a Delete that did not happen must be an error", found, err)
		}
	}
}

// ProbeResult is the outcome of AtomicityProbe.
type ProbeResult struct {
	// Want is the number of acknowledged increments, Got the final count.
	// Got < Want means writes were lost (a Replace that did not really
	// compare, or a dropped write).
	Want, Got int
	// WriteErrors counts increments whose write failed: each may or may not
	// have been applied, so Got may exceed Want by up to WriteErrors.
	WriteErrors int
	// Absent counts Gets that reported the counter absent after it was known
	// to exist: the probe never deletes it and sets no TTL.
	Absent int
}

// Lost returns the number of lost increments: Want - Got, negative when
// the counter holds more than the acknowledged increments.
func (r ProbeResult) Lost() int { return r.Want - r.Got }

// Extra returns the increments applied beyond every acknowledged and every
// failed write: writes that answered "lost race" although they had been
// applied, which the caller then applied again.
func (r ProbeResult) Extra() int { return max(0, r.Got-r.Want-r.WriteErrors) }

// probePatience bounds the probe in real time: when no increment has
// succeeded for this long, the probe fails, so a store whose writes always
// lose cannot stall it. (One worker may starve for a while as others win:
// a compare-and-swap loop is not fair, and that is no fault of the store.)
const probePatience = 5 * time.Second

// probeReserve is the part of ctx's time the probe keeps for the
// increments under way and its final read: it starts no increment later.
const probeReserve = 10 * time.Second

// probeMinimum is the fewest acknowledged increments per worker a probe
// cut short by its context's deadline judges on.
const probeMinimum = 10

// AtomicityProbe has workers goroutines each add 1, each times, to a decimal
// counter at key through the store SPI alone (Get, then Insert or Replace,
// retrying lost races and failed reads), and returns the acknowledged and
// the final count. It detects stores whose compare-and-swap is not atomic
// under concurrent connections, stores that apply a write but report a lost
// race, and stores that report a live key absent. A failed write is counted
// (its outcome is unknown) and not retried. When ctx has a deadline, the
// workers start no increment within 10 s of it, and a probe so cut short
// (a slow store, a loaded machine) judges the increments it made, if every
// worker's share came to at least 10 acknowledged increments. It returns
// an error when ctx ends first, when fewer increments were made, when the
// counter is corrupt, when more than a tenth of the increments fail, or
// when one increment cannot succeed for 5 s.
func AtomicityProbe(ctx context.Context, s cas.Store, key string, workers, each int) (ProbeResult, error) {
	var wg sync.WaitGroup
	var p probe
	p.progress.Store(time.Now().UnixNano())
	stop := time.Time{}
	if dl, ok := ctx.Deadline(); ok {
		stop = dl.Add(-probeReserve)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each && ctx.Err() == nil && (stop.IsZero() || time.Now().Before(stop)); i++ {
				if err := p.increment(ctx, s, key, workers*each); err != nil {
					cancel(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return ProbeResult{}, err
	}
	r := ProbeResult{Want: int(p.ok.Load()), WriteErrors: int(p.writeErrs.Load()), Absent: int(p.absent.Load())}
	if r.Want < workers*each && r.Want < workers*probeMinimum {
		return r, fmt.Errorf("tck: the probe made %d acknowledged increments of %d before its deadline, too few (< %d) to judge", r.Want, workers*each, workers*probeMinimum)
	}
	data, _, found, err := s.Get(ctx, key)
	if err != nil {
		return r, err
	}
	if found {
		if r.Got, err = strconv.Atoi(string(data)); err != nil {
			return r, fmt.Errorf("tck: probe counter corrupted: %q", data)
		}
	}
	return r, nil
}

// probe is the shared state of one probe's workers.
type probe struct {
	created               atomic.Bool // the counter is known to exist
	ok, writeErrs, absent atomic.Int64
	errs                  atomic.Int64
	progress              atomic.Int64 // when an increment last succeeded, Unix ns
}

// increment adds 1 to the counter: retries lost races and failed reads,
// counts a failed write and moves on. It returns an error that ends the
// probe.
func (p *probe) increment(ctx context.Context, s cas.Store, key string, total int) error {
	var last string
	for {
		ok, inWrite, err := incrementOnce(ctx, s, key, p)
		switch {
		case ok:
			p.ok.Add(1)
			p.progress.Store(time.Now().UnixNano())
			return nil
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			if n := p.errs.Add(1); n > int64(max(10, total/10)) {
				return fmt.Errorf("the store failed %d calls during the probe (last: %w)", n, err)
			}
			if inWrite {
				p.writeErrs.Add(1)
				return nil
			}
			last = fmt.Sprintf("Get failed: %v", err)
		default:
			last = "the write lost the race"
		}
		if time.Since(time.Unix(0, p.progress.Load())) > probePatience {
			return fmt.Errorf("no increment succeeded for %v (%s): writes that always lose the race (an Insert or a Replace that reports ok=false when it should write) leave every bucket stuck", probePatience, last)
		}
	}
}

// incrementOnce makes one attempt to add 1 to the decimal counter at key:
// read, then insert or replace. ok=false with no error is a lost race;
// inWrite says whether an error came from the write (which may have been
// applied). p, if not nil, learns that the counter exists and counts Gets
// that report it absent after that.
func incrementOnce(ctx context.Context, s cas.Store, key string, p *probe) (ok, inWrite bool, err error) {
	known := p != nil && p.created.Load()
	data, ver, found, err := s.Get(ctx, key)
	if err != nil {
		return false, false, err
	}
	switch {
	case found && p != nil:
		p.created.Store(true)
	case !found && known:
		p.absent.Add(1)
	}
	runtime.Gosched() // let other writers in between, as network latency would
	if !found {
		ok, err = s.Insert(ctx, key, []byte("1"), 0)
		if ok && p != nil {
			p.created.Store(true)
		}
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
	w, each := e.cfg.probeWorkers, e.cfg.probeEach
	r, err := AtomicityProbe(e.ctx, e.store, e.key("probe"), w, each)
	if err != nil {
		e.Fatalf("atomicity probe (%d workers × %d increments through Get+Insert/Replace): %v", w, each, err)
	}
	e.Logf("atomicity probe: %d acknowledged increments (of %d planned), counter %d, %d failed writes, %d spurious absences", r.Want, w*each, r.Got, r.WriteErrors, r.Absent)
	if r.Lost() > 0 {
		e.Errorf("atomicity probe: %d concurrent increments through Get+Replace were acknowledged, but the counter ended at %d: %d lost. Replace is not an atomic compare-and-swap under concurrency (or writes are dropped): compare the version and write in one indivisible step of the store", r.Want, r.Got, r.Lost())
	}
	if x := r.Extra(); x > 0 {
		e.Errorf("atomicity probe: the counter ended at %d, %d above the %d acknowledged increments and %d failed writes: writes that answered ok=false (a lost race) had been applied, so each was retried and applied again — every such request is charged twice. Answer ok=true when the write happened (a resent write must recognise itself), and return an error when its outcome is unknown", r.Got, x, r.Want, r.WriteErrors)
	}
	if r.Absent > 0 {
		e.Errorf("atomicity probe: Get reported the counter absent %d times after it existed (it is never deleted and has no TTL): a live key reported absent is re-created full, or fails under WithRecoveryFail. found=false must mean absent; a read that cannot tell must be an error", r.Absent)
	}
}

// errInjected is the failure the kit injects.
var errInjected = errors.New("tck: injected store failure")
