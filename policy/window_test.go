package policy

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core/wire"
)

// store runs items against buckets held in memory through wire.Process,
// exactly as an executor would, one atomic batch per item.
type store map[string][]byte

func (s store) run(t *testing.T, it *item, now time.Time) Status {
	t.Helper()
	var res []wire.Result
	if ops := it.Ops(); ops != nil {
		cfg := it.BucketConfig()
		req := wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &cfg, Ops: ops}
		next, changed, resp := wire.Process(s[it.Key], req, now.UnixNano())
		if resp.Status != wire.StatusOK {
			t.Fatalf("process: %v %s", resp.Status, resp.Message)
		}
		if changed {
			s[it.Key] = next
		}
		res = resp.Results
	}
	st, err := it.Decide(res, now)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// counterModel is envoyproxy/ratelimit's fixed window, written from its
// description: one counter per window (aligned to the epoch), INCRBY hits on
// every request, refused or not; over when the count after exceeds the limit.
type counterModel struct {
	n, unit uint64
	counts  map[uint64]uint64
}

func (m *counterModel) hit(h uint64, now time.Time) (st Status) {
	sec := uint64(now.Unix())
	w := sec / m.unit * m.unit
	before := m.counts[w]
	after := before + h
	m.counts[w] = after
	st.ResetAfter = time.Duration(m.unit-sec%m.unit) * time.Second
	near := uint64(math.Floor(float64(float32(m.n) * 0.8)))
	if after > m.n {
		st.Code, st.Over = OverLimit, true
		if before >= m.n {
			st.overHits = h
		} else {
			st.overHits = after - m.n
			st.nearHits = m.n - max(near, before)
		}
		return st
	}
	st.Code, st.Remaining, st.withinHits = codeOK, uint32(m.n-after), h
	if after > near {
		if before >= near {
			st.nearHits = h
		} else {
			st.nearHits = after - near
		}
	}
	return st
}

func windowItem(t *testing.T, n uint32, unit Unit, h uint64) item {
	t.Helper()
	return item{Kind: limited, Hits: h, Key: "k", nearRatio: 0.8,
		Rule: Rule{Limit: Limit{RequestsPerUnit: n, Unit: unit, Algorithm: FixedWindow}}}
}

// TestFixedWindowMatchesCounter drives random hit sequences, with checks of
// 0 hits, hits beyond the limit and jumps across window boundaries, through
// the fixed-window bucket and the counter model and wants the same code,
// remaining, reset and metric increments for every request.
func TestFixedWindowMatchesCounter(t *testing.T) {
	for _, n := range []uint32{0, 1, 2, 5, 10, 100} {
		for _, unit := range []Unit{unitSecond, unitMinute, unitDay} {
			rng := rand.New(rand.NewPCG(uint64(n), uint64(unit)))
			m := &counterModel{n: uint64(n), unit: uint64(unit.seconds()), counts: map[uint64]uint64{}}
			s := store{}
			now := time.Unix(1_700_000_000, 123)
			for i := range 3000 {
				var h uint64
				switch rng.IntN(8) {
				case 0:
					h = 0
				case 1:
					h = uint64(n)
				case 2:
					h = uint64(n) + 1 + rng.Uint64N(3)
				case 3:
					h = 1 << 40
				default:
					h = 1 + rng.Uint64N(3)
				}
				switch rng.IntN(10) {
				case 0: // to just before or at the next boundary
					u := int64(m.unit) * int64(time.Second)
					next := (now.UnixNano()/u + 1) * u
					now = time.Unix(0, next-int64(rng.IntN(2)))
				case 1: // several windows on
					now = now.Add(time.Duration(1+rng.IntN(3)) * unit.Duration())
				default:
					now = now.Add(time.Duration(rng.Int64N(int64(unit.Duration()) / 20)))
				}
				it := windowItem(t, n, unit, h)
				got, want := s.run(t, &it, now), m.hit(h, now)
				got.retryAfter, got.shadowHits = 0, 0
				if got != want {
					t.Fatalf("n=%d unit=%v request %d (%d hits at %v): got %+v, want %+v", n, unit, i, h, now, got, want)
				}
			}
		}
	}
}

// TestFixedWindowCheckOnly pins the case only a counter that keeps counting
// refused hits gets right: after a refused hit a check of 0 hits is over,
// while a window used up exactly is not.
func TestFixedWindowCheckOnly(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name  string
		hits  []uint64
		check Code
	}{
		{"exactly at the limit", []uint64{3}, codeOK},
		{"one refused hit", []uint64{3, 1}, OverLimit},
		{"refused batch", []uint64{2, 2}, OverLimit},
		{"below", []uint64{2}, codeOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := store{}
			for _, h := range tc.hits {
				it := windowItem(t, 3, unitMinute, h)
				s.run(t, &it, now)
			}
			it := windowItem(t, 3, unitMinute, 0)
			if got := s.run(t, &it, now).Code; got != tc.check {
				t.Fatalf("check: %v, want %v", got, tc.check)
			}
			it = windowItem(t, 3, unitMinute, 0)
			if got := s.run(t, &it, now.Add(time.Minute)); got.Code != codeOK || got.Remaining != 3 {
				t.Fatalf("next window: %+v, want codeOK with 3 remaining", got)
			}
		})
	}
}

func TestFixedWindowRetryAfter(t *testing.T) {
	now := time.Unix(60*28_333_333+10, 0) // 10 s into a minute
	s := store{}
	it := windowItem(t, 2, unitMinute, 2)
	s.run(t, &it, now)
	it = windowItem(t, 2, unitMinute, 1)
	if st := s.run(t, &it, now); !st.Over || st.retryAfter != 50*time.Second || st.ResetAfter != 50*time.Second {
		t.Fatalf("over: %+v, want retry and reset after 50s", st)
	}
	it = windowItem(t, 2, unitMinute, 3)
	if st := s.run(t, &it, now); st.retryAfter != never {
		t.Fatalf("hits above the limit: retry after %v, want never", st.retryAfter)
	}
}
