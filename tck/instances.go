package tck

import (
	"fmt"
	"time"

	"github.com/bucketgrid/bucketgrid/cas/presence"
)

// checkInstanceCount runs three instance counters (cas/presence, what a
// degraded Manager divides its limits by) on the store: they count each
// other; one that stops refreshing, as a crashed instance does, drops out
// of the others' count once its record's TTL has passed, never before; and
// one that withdraws drops out at once. It judges with the TTL plan's
// bounds, so load can only leave it unable to judge (and try again with
// longer TTLs), never accuse a correct store.
func checkInstanceCount(e *env) {
	x := ttlRun{e: e, p: newTTLPlan(e.cfg.ttl)}
	x.attempts("instance count", func(try int, y ttlRun) outcome { return y.instanceCount(try) })
}

func (x ttlRun) instanceCount(try int) outcome {
	e := x.e
	ttl := x.p.long
	cfg := presence.Config{Prefix: e.key(fmt.Sprintf("instances-%d/", try)), Slots: 4, TTL: ttl, Refresh: ttl / 2,
		Timeout: ttl / 2}
	cs := make([]*presence.Counter, 3)
	for i := range cs {
		c, err := presence.New(e.store, cfg)
		if err != nil {
			e.Errorf("presence.New: %v", err)
			return failed
		}
		cs[i] = c
	}
	defer func() {
		for _, c := range cs {
			_ = c.Withdraw(e.ctx)
		}
	}()
	var written [3]stamp // each counter's last refresh
	// refresh is done, failed, or untimed when the refresh ran out of its
	// own time (cfg.Timeout) on a store slowed by a loaded machine: too late
	// to judge, not a fault of the store.
	refresh := func(i int) (stamp, int, outcome) {
		w := stamp{sent: time.Now()}
		err := cs[i].Refresh(e.ctx)
		w.returned = time.Now()
		switch {
		case err != nil && e.ctx.Err() == nil && w.returned.Sub(w.sent) >= cfg.Timeout:
			e.Logf("a refresh of a presence record took %v, its whole timeout: too late to judge (%v)", w.returned.Sub(w.sent).Round(time.Millisecond), err)
			return w, 0, untimed
		case err != nil:
			e.Errorf("refresh of a presence record: %v", err)
			return w, 0, failed
		}
		written[i] = w
		return w, cs[i].LiveInstances(), done
	}
	// alive reports whether counter j's record must still be there when a
	// read that returned at r was made
	alive := func(j int, r time.Time) bool {
		return !written[j].sent.IsZero() && r.Before(written[j].sent.Add(x.p.early(ttl)))
	}

	// three refresh in turn: once each has a record, each counts three
	judged := false
	for round := 0; round < 4 && !judged; round++ {
		for i := range cs {
			others := [2]int{(i + 1) % 3, (i + 2) % 3}
			w, n, o := refresh(i)
			if o != done {
				return o
			}
			if !alive(others[0], w.returned) || !alive(others[1], w.returned) {
				continue
			}
			judged = true
			if n != 3 {
				e.Errorf("three instances refreshed their presence records within the TTL (%v), and one counted %d: a record written with a TTL was not found before the TTL had passed", ttl, n)
				return failed
			}
		}
	}
	if !judged {
		return untimed
	}

	// counter 2 stops: the others go on refreshing and count it until its
	// TTL has passed, and no longer once it is far past
	stopped := written[2]
	gone := stopped.returned.Add(x.p.late(ttl))
wait:
	for {
		for i := range 2 {
			w, n, o := refresh(i)
			if o != done {
				return o
			}
			other := 1 - i
			switch {
			case alive(2, w.returned) && alive(other, w.returned) && n != 3:
				e.Errorf("an instance was dropped from the count %v after its last refresh, before its record's TTL (%v): counted %d of 3", w.returned.Sub(stopped.sent).Round(time.Millisecond), ttl, n)
				return failed
			case w.sent.After(gone) && n == 3:
				e.Errorf("an instance that stopped refreshing was still counted %v after its last refresh: its presence record outlived its TTL (%v); the store ignores or stretches the TTL", w.sent.Sub(stopped.returned).Round(time.Millisecond), ttl)
				return failed
			case w.sent.After(gone) && alive(other, w.returned) && n != 2:
				e.Errorf("two instances refreshing, one stopped long ago: counted %d, want 2", n)
				return failed
			case w.sent.After(gone) && alive(other, w.returned):
				break wait
			case w.sent.After(gone.Add(4 * ttl)):
				return untimed // the two could not keep their records alive
			}
		}
		if !x.sleepUntil(time.Now().Add(ttl / 20)) {
			return failed
		}
	}
	// counter 1 withdraws: counter 0 counts itself alone at its next refresh
	if err := cs[1].Withdraw(e.ctx); err != nil {
		e.Errorf("withdrawing a presence record: %v", err)
		return failed
	}
	if _, n, o := refresh(0); o != done {
		return o
	} else if n != 1 {
		e.Errorf("an instance that withdrew its presence record was still counted: %d, want 1", n)
		return failed
	}
	return done
}
