package policy

import (
	"testing"
	"time"
)

func bucketItem(n, burst uint32, h uint64) item {
	return item{Kind: limited, Hits: h, Key: "tb", nearRatio: 0.8,
		Rule: Rule{Limit: Limit{RequestsPerUnit: n, Unit: unitSecond, Algorithm: TokenBucket, Burst: burst}}}
}

func TestTokenBucket(t *testing.T) {
	s := store{}
	now := time.Unix(1_700_000_000, 0)
	step := func(h uint64, at time.Duration) Status {
		t.Helper()
		it := bucketItem(10, 20, h)
		return s.run(t, &it, now.Add(at))
	}
	// a fresh bucket holds the burst
	for i := range 20 {
		if st := step(1, 0); st.Code != codeOK || st.Remaining != uint32(19-i) {
			t.Fatalf("hit %d: %+v", i, st)
		}
	}
	st := step(1, 0)
	if st.Code != OverLimit || !st.Over || st.Remaining != 0 || st.retryAfter != 100*time.Millisecond {
		t.Fatalf("empty: %+v, want over, retry after 100ms", st)
	}
	if st.ResetAfter != 2*time.Second {
		t.Fatalf("reset after %v, want 2s to refill 20 at 10/s", st.ResetAfter)
	}
	// greedy refill: one token every 100 ms, not a window's worth at once
	if st := step(1, 99*time.Millisecond); st.Code != OverLimit {
		t.Fatalf("after 99ms: %+v", st)
	}
	if st := step(1, 100*time.Millisecond); st.Code != codeOK || st.Remaining != 0 {
		t.Fatalf("after 100ms: %+v", st)
	}
	// a check of 0 hits charges nothing; over when not one token is left
	if st := step(0, 100*time.Millisecond); st.Code != OverLimit || st.retryAfter != 100*time.Millisecond {
		t.Fatalf("check on empty: %+v", st)
	}
	if st := step(0, 250*time.Millisecond); st.Code != codeOK || st.Remaining != 1 || st.ResetAfter != 1850*time.Millisecond {
		t.Fatalf("check with one token: %+v", st)
	}
	if st := step(0, 250*time.Millisecond); st.Remaining != 1 {
		t.Fatalf("the check charged: %+v", st)
	}
	// more than the burst is refused whatever the state, and forever
	if st := step(21, 10*time.Second); st.Code != OverLimit || st.retryAfter != never {
		t.Fatalf("above the burst: %+v", st)
	}
	if st := step(20, 10*time.Second); st.Code != codeOK || st.Remaining != 0 {
		t.Fatalf("the whole burst after a rest: %+v", st)
	}
}

func TestTokenBucketZeroRequests(t *testing.T) {
	for _, h := range []uint64{0, 1, 5} {
		it := bucketItem(0, 0, h)
		if it.Ops() != nil {
			t.Fatal("a limit of 0 needs no bucket")
		}
		st, err := it.Decide(nil, time.Now())
		if err != nil || st.Code != OverLimit || st.retryAfter != never || st.overHits != h {
			t.Fatalf("%d hits: %+v %v", h, st, err)
		}
	}
}

func TestFixedWindowZeroRequests(t *testing.T) {
	s := store{}
	now := time.Unix(1_700_000_000, 0)
	it := windowItem(t, 0, unitSecond, 0)
	if st := s.run(t, &it, now); st.Code != codeOK || st.Remaining != 0 {
		t.Fatalf("check of an unused window of 0: %+v (envoyproxy/ratelimit: codeOK)", st)
	}
	it = windowItem(t, 0, unitSecond, 1)
	if st := s.run(t, &it, now); st.Code != OverLimit || st.retryAfter != never {
		t.Fatalf("a hit on a limit of 0: %+v", st)
	}
}

func TestModes(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name          string
		shadow, quota bool
		code          Code
		shadowHits    uint64
	}{
		{"enforced", false, false, OverLimit, 0},
		{"shadow", true, false, codeOK, 1},
		{"quota", false, true, codeOK, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := store{}
			it := windowItem(t, 1, unitMinute, 1)
			it.Rule.ShadowMode, it.Rule.QuotaMode = tc.shadow, tc.quota
			s.run(t, &it, now)
			st := s.run(t, &it, now)
			if !st.Over || st.Code != tc.code || st.shadowHits != tc.shadowHits || st.overHits != 1 {
				t.Fatalf("%+v", st)
			}
		})
	}
}

func TestOverall(t *testing.T) {
	ok, over := Status{Code: codeOK}, Status{Code: OverLimit, Over: true}
	shadowed := Status{Code: codeOK, Over: true}
	for _, tc := range []struct {
		name     string
		st       []Status
		global   bool
		code     Code
		shadowed bool
	}{
		{"all OK", []Status{ok, ok}, false, codeOK, false},
		{"one over", []Status{ok, over}, false, OverLimit, false},
		{"shadowed rule", []Status{shadowed, ok}, false, codeOK, false},
		{"global shadow", []Status{over, ok}, true, codeOK, true},
		{"global shadow, nothing over", []Status{ok}, true, codeOK, false},
	} {
		code, sh := overall(tc.st, tc.global)
		if code != tc.code || sh != tc.shadowed {
			t.Errorf("%s: %v %v, want %v %v", tc.name, code, sh, tc.code, tc.shadowed)
		}
	}
}

func TestDecideRejectsWrongResults(t *testing.T) {
	it := windowItem(t, 3, unitSecond, 1)
	if _, err := it.Decide(nil, time.Now()); err == nil {
		t.Fatal("no error for missing results")
	}
}
