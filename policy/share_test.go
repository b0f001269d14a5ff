package policy

import (
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// runShare runs it's operations on a share of n instances, as a degraded
// executor does (its configuration and every replacement cut with
// core.Config.Share), and decides them with it.share(n).
func runShare(t *testing.T, s store, it *item, n int, now time.Time) Status {
	t.Helper()
	cfg := it.BucketConfig()
	cut := cfg.Share(n)
	ops := append([]wire.Op(nil), it.Ops()...)
	for i := range ops {
		if ops[i].Kind == wire.OpReplaceConfiguration {
			c := ops[i].Config.Share(n)
			ops[i].Config = &c
		}
	}
	req := wire.Request{Mode: wire.ModeCreateOrReplace, Config: &cut, Ops: ops, Inheritance: core.InheritProportionally}
	next, changed, resp := wire.Process(s[it.Key], req, now.UnixNano())
	if resp.Status != wire.StatusOK {
		t.Fatalf("process: %v %s", resp.Status, resp.Message)
	}
	if changed {
		s[it.Key] = next
	}
	sh := shared(it, n)
	st, err := sh.Decide(resp.Results, now)
	if err != nil {
		t.Fatal(err)
	}
	if q := sh.Quota(&st); q.Limit != int64(sh.Rule.capacity()) {
		t.Fatalf("quota limit %d, want the share's %d", q.Limit, sh.Rule.capacity())
	}
	return st
}

// TestShareDecidesTheShare wants an item decided from a share of n
// instances to admit the share, ⌈limit/n⌉ (a fixed window) or ⌈burst/n⌉ (a
// token bucket), and then refuse, with the share's remaining and a fixed
// window's end as its reset.
func TestShareDecidesTheShare(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 45, 0, time.UTC) // 15 s before the minute's end
	for _, tc := range []struct {
		name  string
		it    item
		n     int
		share uint32
	}{
		{"window 5/minute of 2", windowItem(t, 5, unitMinute, 1), 2, 3},
		{"window 7/minute of 3", windowItem(t, 7, unitMinute, 1), 3, 3},
		{"window 10/second of 4", windowItem(t, 10, unitSecond, 1), 4, 3},
		{"window 5/minute of 1", windowItem(t, 5, unitMinute, 1), 1, 5},
		{"bucket 10/second burst 4 of 3", bucketItem(10, 4, 1), 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := store{}
			sh := shared(&tc.it, tc.n)
			if got := sh.Rule.capacity(); got != tc.share {
				t.Fatalf("share's capacity %d, want %d", got, tc.share)
			}
			check := tc.it
			check.Hits = 0
			if st := runShare(t, s, &check, tc.n, now); st.Over || st.Remaining != tc.share {
				t.Fatalf("check of 0 hits: %+v, want %d remaining", st, tc.share)
			}
			for i := range tc.share + 1 {
				it := tc.it
				st := runShare(t, s, &it, tc.n, now)
				if want := i >= tc.share; st.Over != want || (!want && st.Remaining != tc.share-i-1) {
					t.Fatalf("hit %d: %+v, want over %v, %d remaining", i+1, st, want, tc.share-i-1)
				}
				if tc.it.Rule.Algorithm == FixedWindow {
					end := time.Duration(tc.it.Rule.Unit.seconds()-now.Unix()%tc.it.Rule.Unit.seconds()) * time.Second
					if st.ResetAfter != end {
						t.Fatalf("hit %d: reset %v, want %v", i+1, st.ResetAfter, end)
					}
				}
			}
		})
	}
}

// TestShareKeepsTheItem wants Share to leave the item it is called on, and
// its bucket configuration, as they were.
func TestShareKeepsTheItem(t *testing.T) {
	it := windowItem(t, 5, unitMinute, 1)
	before := it.BucketConfig()
	sh := shared(&it, 2)
	_ = sh.BucketConfig()
	after := it.BucketConfig()
	if it.Rule.RequestsPerUnit != 5 || !after.Equal(&before) || it.window() != windowTokens(unitMinute) {
		t.Fatalf("Share changed the item: %+v", it)
	}
}

// shared returns a copy of it shared among n instances.
func shared(it *item, n int) item {
	c := *it
	c.share(n)
	return c
}
