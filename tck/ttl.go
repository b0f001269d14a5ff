package tck

import (
	"bytes"
	"fmt"
	"sync"
	"time"
)

// The TTL checks wait in real time: stores expire entries on their own
// clocks, which the kit cannot fake. Every judgement is a bound that load
// can only weaken, never turn false: a value seen absent by a Get that
// returned at g lived at most g minus the moment its write was sent, and a
// value seen present by a Get sent at g lived at least g minus the moment
// its write returned. A slow machine makes the kit see less, never accuse a
// correct store.

// ttlPlan holds the TTLs and tolerances for a store of resolution r.
type ttlPlan struct {
	r     time.Duration // the store's declared resolution
	short time.Duration // a sub-second TTL
	long  time.Duration // a TTL of seconds, several resolutions long
}

func newTTLPlan(r time.Duration) ttlPlan {
	return ttlPlan{r: r, short: 250 * time.Millisecond, long: max(time.Second, 3*r)}
}

// early is how long after its write was sent a value with TTL ttl must
// still be there.
func (p ttlPlan) early(ttl time.Duration) time.Duration { return ttl - p.r }

// late is how long after its write returned a value with TTL ttl must be
// gone: a quarter of the TTL beyond the resolution, so "never far late".
func (p ttlPlan) late(ttl time.Duration) time.Duration { return ttl + p.r + ttl/4 }

// poll is the interval between Gets while watching a value with TTL ttl.
func (p ttlPlan) poll(ttl time.Duration) time.Duration {
	return min(max(ttl/50, 5*time.Millisecond), 25*time.Millisecond)
}

// stamp brackets a store call in real time.
type stamp struct{ sent, returned time.Time }

// seen is what watching a value observed.
type seen struct {
	gone     bool
	goneBy   time.Time // when the first Get that found it absent returned
	lastSeen time.Time // when the last Get that found it present was sent
}

// ttlRun is one TTL check in progress; its methods are safe for concurrent
// use, so scenarios run side by side on keys of their own.
type ttlRun struct {
	e *env
	p ttlPlan
}

func (x ttlRun) sleepUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return x.e.ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-x.e.ctx.Done():
		x.e.Errorf("the check ran out of time (%v) waiting for a TTL: %v", checkTimeout, x.e.ctx.Err())
		return false
	}
}

// insert writes key with ttl, failing the check unless it is written.
func (x ttlRun) insert(key string, val []byte, ttl time.Duration) (stamp, bool) {
	w := stamp{sent: time.Now()}
	ok, err := x.e.store.Insert(x.e.ctx, key, val, ttl)
	w.returned = time.Now()
	if err != nil || !ok {
		x.e.Errorf("Insert of an absent key with TTL %v: ok=%v err=%v; want it written", ttl, ok, err)
		return w, false
	}
	return w, true
}

// outcome is how a step of a TTL scenario ended.
type outcome int

const (
	done    outcome = iota // the step did what it had to
	failed                 // the store broke a rule; the failure is recorded
	untimed                // the kit acted too late to judge (a loaded machine): try again
)

// replace reads key, written at prev with TTL prevTTL (0: none), and
// replaces its value with ttl. A value gone before its TTL could have run
// out is an early expiry; gone after that, the kit came too late and the
// step is untimed.
func (x ttlRun) replace(key string, val []byte, ttl time.Duration, prev stamp, prevTTL time.Duration) (stamp, outcome) {
	gone := func(at time.Time, what string) outcome {
		if prevTTL > 0 && at.Sub(prev.sent) >= x.p.early(prevTTL) {
			return untimed
		}
		lived := at.Sub(prev.sent)
		if prevTTL == 0 {
			x.e.Errorf("a value written without a TTL (0: no expiry) was gone %s, %v after its write began: it must stay until deleted", what, lived.Round(time.Millisecond))
			return failed
		}
		x.e.Errorf("a value written with TTL %v was gone %s at most %v after its write began, before it could expire: %s. A value must live its whole TTL",
			prevTTL, what, lived.Round(time.Millisecond), earlyWhy(prevTTL)(lived))
		return failed
	}
	_, ver, found, err := x.e.store.Get(x.e.ctx, key)
	switch {
	case err != nil:
		x.e.Errorf("Get: %v", err)
		return stamp{}, failed
	case !found:
		return stamp{}, gone(time.Now(), "for the Get before a Replace")
	}
	w := stamp{sent: time.Now()}
	ok, err := x.e.store.Replace(x.e.ctx, key, val, ver, ttl)
	w.returned = time.Now()
	switch {
	case err != nil:
		x.e.Errorf("Replace with the current version and TTL %v: %v", ttl, err)
		return w, failed
	case !ok:
		return w, gone(w.returned, "for a Replace with the version just read (or the Replace lost a race no one ran)")
	}
	return w, done
}

// maxAttempts bounds the runs of a TTL scenario that came too late to
// judge; each run has twice the room of the one before.
const maxAttempts = 5

// attempts runs a scenario until it is not untimed. A run that came too
// late to judge (the machine was too loaded to act within a TTL) is run
// again with TTLs twice as long, so the kit's own delays weigh half as
// much, up to maxAttempts runs (16× the TTLs); only then does the check
// fail for want of a judgement.
func (x ttlRun) attempts(what string, scenario func(try int, y ttlRun) outcome) {
	y := x
	for try := range maxAttempts {
		if scenario(try, y) != untimed {
			return
		}
		y.p.short, y.p.long = 2*y.p.short, 2*y.p.long
		y.e.Logf("%s: came too late to judge (run %d); again with TTLs of %v and %v", what, try+1, y.p.short, y.p.long)
	}
	x.e.Errorf("%s: the kit came too late to judge the store %d times in a row, with TTLs up to %v (this machine is too loaded to act within a TTL); run the kit again", what, maxAttempts, y.p.long/2)
}

// present reports whether key is there now, failing the check on an error.
func (x ttlRun) present(key string) (found, ok bool) {
	_, _, found, err := x.e.store.Get(x.e.ctx, key)
	if err != nil {
		x.e.Errorf("Get: %v", err)
		return false, false
	}
	return found, true
}

// watch polls key, written at w with ttl, until it is gone or has outlived
// the late bound.
func (x ttlRun) watch(key string, w stamp, ttl time.Duration) (seen, bool) {
	var s seen
	for {
		g0 := time.Now()
		found, ok := x.present(key)
		g1 := time.Now()
		if !ok {
			return s, false
		}
		if !found {
			s.gone, s.goneBy = true, g1
			return s, true
		}
		s.lastSeen = g0
		if g0.Sub(w.returned) > x.p.late(ttl) {
			return s, true
		}
		if !x.sleepUntil(time.Now().Add(x.p.poll(ttl))) {
			return s, false
		}
	}
}

// judge fails the check when s shows key expiring early or late. what
// names the write; why explains an early expiry, given the most the value
// lived.
func (x ttlRun) judge(what string, w stamp, ttl time.Duration, s seen, why func(lived time.Duration) string) {
	if s.gone {
		if lived := s.goneBy.Sub(w.sent); lived < x.p.early(ttl) {
			x.e.Errorf("%s: the value was gone at most %v after the write began, with TTL %v: %s. A value must live its whole TTL (within the store's declared resolution, %v; see WithTTLResolution), or buckets expire before they are full again and admit too much",
				what, lived.Round(time.Millisecond), ttl, why(lived), x.p.r)
		}
		return
	}
	x.e.Errorf("%s: the value was still there %v after the write returned, with TTL %v (tolerance %v): the store ignores or stretches the TTL, so idle buckets are never cleaned up. A positive TTL must expire the value that long after the write; only 0 means no expiry",
		what, s.lastSeen.Sub(w.returned).Round(time.Millisecond), ttl, x.p.late(ttl)-ttl)
}

// earlyWhy names the likely mistake behind a value that lived at most lived
// of its TTL.
func earlyWhy(ttl time.Duration) func(time.Duration) string {
	return func(lived time.Duration) string {
		switch {
		case lived*10 < ttl:
			return "it expired early, at least 10× too short — a TTL read in the wrong unit (milliseconds where seconds were meant?)"
		case lived*5 < ttl*4:
			return "it expired early, after a fraction of the TTL — the TTL is halved or divided somewhere"
		}
		return "it expired early — something is subtracted from the TTL, or the expiry is computed on a clock that runs ahead"
	}
}

// checkTTL checks that every write's TTL is honoured: never early, never
// far late, sub-second, a second or so and several seconds (where the
// project's presence records and leases live), set by Insert and by
// Replace, restarted by every write, removed by a write with TTL 0, and
// over 30 days a duration. TTLs of minutes to hours are judged only as
// present at the end (the kit cannot wait them out).
func checkTTL(e *env) {
	x := ttlRun{e: e, p: newTTLPlan(e.cfg.ttl)}
	short, long := x.p.short, x.p.long
	val := []byte{1, 0, 2, 0}
	scenarios := []func(){
		func() { // sub-second, by Insert
			k := e.key("ttl-short")
			if w, ok := x.insert(k, val, short); ok {
				if s, ok := x.watch(k, w, short); ok {
					x.judge("Insert with a sub-second TTL", w, short, s, earlyWhy(short))
				}
			}
		},
		func() { // seconds, by Insert
			k := e.key("ttl-long")
			if w, ok := x.insert(k, val, long); ok {
				if s, ok := x.watch(k, w, long); ok {
					x.judge("Insert with TTL "+long.String(), w, long, s, earlyWhy(long))
				}
			}
		},
		func() { // seconds, the range presence records and leases use
			mid := max(4*time.Second, long+time.Second)
			k := e.key("ttl-mid")
			if w, ok := x.insert(k, val, mid); ok {
				if s, ok := x.watch(k, w, mid); ok {
					x.judge("Insert with TTL "+mid.String(), w, mid, s, earlyWhy(mid))
				}
			}
		},
		func() { // a Replace sets a TTL on a value that had none
			k := e.key("ttl-replace")
			i, ok := x.insert(k, val, 0)
			if !ok {
				return
			}
			if w, o := x.replace(k, []byte{2, 0}, long, i, 0); o == done {
				if s, ok := x.watch(k, w, long); ok {
					x.judge("Replace with TTL "+long.String()+" of a value inserted without one (Replace must set the TTL it is given, not keep the old one or drop it)", w, long, s, earlyWhy(long))
				}
			}
		},
		func() { // every write restarts the TTL
			x.attempts("TTL restarted by a Replace", func(try int, x ttlRun) outcome {
				long := x.p.long
				k := e.key(fmt.Sprintf("ttl-restart-%d", try))
				i, ok := x.insert(k, val, long)
				if !ok || !x.sleepUntil(i.sent.Add(long/2)) {
					return failed
				}
				w, o := x.replace(k, []byte{3, 0}, long, i, long)
				if o != done {
					return o
				}
				if s, ok := x.watch(k, w, long); ok {
					x.judge("Replace with TTL "+long.String()+", half a TTL after the Insert", w, long, s, func(lived time.Duration) string {
						if sinceInsert := s.goneBy.Sub(i.sent); sinceInsert <= long+x.p.r+x.p.poll(long)+50*time.Millisecond {
							return fmt.Sprintf("it went %v after the Insert, when the Insert's TTL ran out — the store counts the TTL from the key's creation, not from the last write; every write must set the TTL anew", sinceInsert.Round(time.Millisecond))
						}
						return earlyWhy(long)(lived)
					})
				}
				return done
			})
		},
		func() { // a Replace with TTL 0 removes the expiry
			x.attempts("TTL removed by a Replace with TTL 0", func(try int, x ttlRun) outcome {
				short, long := x.p.short, x.p.long
				k := e.key(fmt.Sprintf("ttl-zero-%d", try))
				i, ok := x.insert(k, val, short)
				if !ok {
					return failed
				}
				if _, o := x.replace(k, []byte{4, 0}, 0, i, short); o != done {
					return o
				}
				for _, at := range []time.Time{i.returned.Add(x.p.late(short)), i.returned.Add(x.p.late(long))} {
					if !x.sleepUntil(at) {
						return failed
					}
					if found, ok := x.present(k); ok && !found {
						x.e.Errorf("a value inserted with TTL %v and then replaced with TTL 0 expired: every write sets the TTL anew, and 0 means none — a Replace without TTL must remove the old expiry (Couchbase and Redis do so when the write passes none)", short)
						return failed
					}
				}
				return done
			})
		},
	}
	// long TTLs are durations: written now, they must still be there once
	// every other scenario is over
	type longTTL struct {
		key     string
		ttl     time.Duration
		replace bool
	}
	longs := []longTTL{
		{e.key("ttl-31d"), 31 * 24 * time.Hour, false},
		{e.key("ttl-31d-replace"), 31 * 24 * time.Hour, true},
		{e.key("ttl-366d"), 366 * 24 * time.Hour, false},
		{e.key("ttl-none"), 0, false},
	}
	written := time.Now()
	for _, l := range longs {
		if l.replace {
			i, ok := x.insert(l.key, val, 0)
			if !ok {
				return
			}
			if _, o := x.replace(l.key, []byte{5, 0}, l.ttl, i, 0); o != done {
				return
			}
		} else if _, ok := x.insert(l.key, val, l.ttl); !ok {
			return
		}
	}
	var wg sync.WaitGroup
	for _, s := range scenarios {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s()
		}()
	}
	wg.Wait()
	for _, l := range longs {
		found, ok := x.present(l.key)
		if !ok || found {
			continue
		}
		how := "Insert"
		if l.replace {
			how = "Replace"
		}
		if l.ttl == 0 {
			e.Errorf("a value inserted with TTL 0 was gone %v later: 0 means no expiry", time.Since(written).Round(time.Millisecond))
			continue
		}
		e.Errorf("a value written by %s with a TTL of %v (%d days) was gone %v later: a TTL is a duration whatever its length. memcached's protocol reads an expiry over 30 days as a Unix timestamp (in 1970: long past), so a monthly bucket expires at once; on such a store send now+ttl as an absolute time (as gocb does), and check for overflow",
			how, l.ttl, l.ttl/(24*time.Hour), time.Since(written).Round(time.Millisecond))
	}
}

// checkExpiredVersionLoses checks what happens to a version once its value
// has expired: a Replace with it loses (an expired bucket never comes
// back), an Insert finds the key absent, a Delete succeeds as of an absent
// key, and the value created anew has a version the old one does not
// match.
func checkExpiredVersionLoses(e *env) {
	x := ttlRun{e: e, p: newTTLPlan(e.cfg.ttl)}
	x.attempts("an expired version loses", func(try int, x ttlRun) outcome { return x.expiredVersionLoses(try) })
}

func (x ttlRun) expiredVersionLoses(try int) outcome {
	e := x.e
	s, ctx, short := e.store, e.ctx, x.p.short
	old, fresh := []byte{1, 1, 0}, []byte{2, 2, 0}
	k, k2, k3 := e.key(fmt.Sprintf("expired-%d", try)), e.key(fmt.Sprintf("expired-insert-%d", try)), e.key(fmt.Sprintf("expired-delete-%d", try))
	i, ok := x.insert(k, old, short)
	if !ok {
		return failed
	}
	if _, ok := x.insert(k2, old, short); !ok {
		return failed
	}
	if _, ok := x.insert(k3, old, short); !ok {
		return failed
	}
	data, v1, found, err := s.Get(ctx, k)
	switch {
	case err != nil:
		e.Errorf("Get: %v", err)
		return failed
	case !found && time.Since(i.sent) >= x.p.early(short):
		return untimed
	case !found:
		e.Errorf("a value inserted with TTL %v was gone at most %v after its write began: %s", short, time.Since(i.sent).Round(time.Millisecond), earlyWhy(short)(time.Since(i.sent)))
		return failed
	case !bytes.Equal(data, old):
		e.Errorf("Get right after an Insert returned %s", mismatch(data, old))
		return failed
	}
	// no Get in between: a store that purges expired entries only when they
	// are read must still refuse them
	if !x.sleepUntil(i.returned.Add(x.p.late(short))) {
		return failed
	}
	revived, err := s.Replace(ctx, k, []byte("revived"), v1, 0)
	if err != nil {
		e.Errorf("Replace of an expired key: %v; want a lost race (ok=false, err=nil)", err)
		return failed
	}
	if revived {
		e.Errorf("Replace with the version of a value whose TTL (%v) had run out %v earlier succeeded: an expired key is gone, so Replace must lose — compare the expiry as well as the version — or an expired bucket comes back with its old state (and without its TTL)",
			short, time.Since(i.returned.Add(short)).Round(time.Millisecond))
	}
	if ok, err := s.Insert(ctx, k2, fresh, 0); err != nil || !ok {
		e.Errorf("Insert over a key whose TTL had run out (not read since): ok=%v err=%v; an expired key must count as absent for Insert, or the bucket can never be created again", ok, err)
	}
	if e.cfg.noDelete == "" {
		if err := s.Delete(ctx, k3); err != nil {
			e.Errorf("Delete of a key whose TTL had run out (not read since, so perhaps not yet reaped): %v; deleting an expired key is deleting an absent one, not an error — a store whose Delete reports \"not found\" for it must treat that as done, or RemoveBucket fails on every idle bucket", err)
		} else if _, _, found, err := s.Get(ctx, k3); err != nil || found {
			e.Errorf("Get after Delete of an expired key: found=%v err=%v; want absent", found, err)
		}
	}
	if revived {
		return failed // the rest needs the key absent
	}
	if _, _, found, err := s.Get(ctx, k); err != nil || found {
		e.Errorf("Get of a key whose TTL (%v) ran out %v ago: found=%v err=%v; want absent", short, time.Since(i.returned.Add(short)).Round(time.Millisecond), found, err)
		return failed
	}
	if ok, err := s.Insert(ctx, k, fresh, 0); err != nil || !ok {
		e.Errorf("Insert over an expired key: ok=%v err=%v; an expired key must count as absent", ok, err)
		return failed
	}
	_, v2, found, err := s.Get(ctx, k)
	if err != nil || !found {
		e.Errorf("Get after re-creating an expired key: found=%v err=%v", found, err)
		return failed
	}
	if v2 == v1 {
		e.Errorf("the key created again after its value expired got version %d, the version of the expired value, though the bytes differ: versions restart after expiry (a per-key counter?), so a client that read the old value wins a Replace against the new one (ABA). Versions must never repeat for a key (see cas.Version)", v2)
	}
	ok, err = s.Replace(ctx, k, []byte("stale"), v1, 0)
	if err != nil {
		e.Errorf("Replace with a version from before the key expired: %v; want a lost race", err)
		return failed
	}
	if ok {
		e.Errorf("a Replace with the version read before the key expired overwrote the value created after it: a stalled client's write wins against a new bucket (ABA). Versions must never repeat for a key, across expiry too")
	}
	return done
}
