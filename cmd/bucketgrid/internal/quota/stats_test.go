package quota

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
)

// waitStats polls the server's Stats until ok holds, with a generous
// deadline (the server's stream handlers run on their own goroutines).
func waitStats(t *testing.T, s *Server, what string, ok func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := s.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never held; stats %+v", what, st)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStats: the counters and gauges follow a stream's life: subscriptions
// answered by kind and paid from the grid, a broken stream's ghost until
// it expires, idle buckets abandoned, buckets beyond MaxBuckets refused.
func TestStats(t *testing.T) {
	f := newFleet(t, tenantRules, Options{IdleAfter: 30 * time.Second})
	free := map[string]string{"other": "x"}
	e := f.envoy("fleet")
	e.decide(tenant)
	e.decide(free)
	f.settle()
	st := f.srv.Stats()
	tb, _ := e.assignment(tenant)
	want := Stats{StreamsOpened: 1, Streams: 1, Reports: 2, Usages: 2, Buckets: 2, GridBuckets: 1,
		Queued: 2, Sent: 2, Actions: Actions{TokenBucket: 1, AllowAll: 1},
		TrackedBytes: subCost(canonical(&rlqspb.BucketId{Bucket: tenant})) + subCost(canonical(&rlqspb.BucketId{Bucket: free}))}
	got := st
	got.TokensPaid, got.TokensReturned = 0, 0
	if got != want {
		t.Fatalf("after two subscriptions: %+v, want %+v", st, want)
	}
	// what the token bucket can let through was paid: its max_tokens and
	// more than a period's fill
	if min := int64(tb.GetTokenBucket().GetMaxTokens() + tb.GetTokenBucket().GetTokensPerFill().GetValue()); st.TokensPaid-st.TokensReturned < min {
		t.Fatalf("%d tokens paid, %d returned for an assignment of %v, want at least %d net", st.TokensPaid, st.TokensReturned, tb, min)
	}

	// a second Envoy whose stream breaks: a ghost until its assignment
	// expires (its reconnect at the next report is a new stream)
	e2 := f.envoy("fleet")
	e2.decide(tenant)
	f.settle()
	e2.breakStream()
	waitStats(t, f.srv, "the broken stream becomes a ghost", func(s Stats) bool { return s.Streams == 1 && s.Ghosts == 1 })
	for range 4 {
		f.step(envoyReportInterval)
	}
	st = waitStats(t, f.srv, "the ghost expires", func(s Stats) bool { return s.Ghosts == 0 })
	if st.Expired != 1 || st.StreamsOpened != 3 || st.StreamErrors != 0 {
		t.Fatalf("20 s after the break: expired %d, streams opened %d, stream errors %d; want 1, 3 (the reconnect), 0 (a cancel is no error)",
			st.Expired, st.StreamsOpened, st.StreamErrors)
	}
	if st.Actions.TokenBucket < 4 {
		t.Fatalf("%d token buckets sent after four periods, want the renewals counted", st.Actions.TokenBucket)
	}

	// no request for IdleAfter: every bucket abandoned
	for range 4 {
		f.step(envoyReportInterval)
	}
	st = f.srv.Stats()
	if st.AbandonedIdle != 3 || st.Actions.Abandon != 3 || st.Buckets != 0 || st.AbandonedUnreported != 0 || st.TrackedBytes != 0 {
		t.Fatalf("after 40 s idle: abandoned %d idle, %d unreported, %d abandons sent, %d buckets tracked (%d bytes); want 3, 0, 3, 0 (0)",
			st.AbandonedIdle, st.AbandonedUnreported, st.Actions.Abandon, st.Buckets, st.TrackedBytes)
	}
	if st.Dropped != 0 || st.GridErrors != 0 {
		t.Fatalf("dropped %d, grid errors %d, want none", st.Dropped, st.GridErrors)
	}
}

// TestStatsRefusedAndGridErrors: a bucket id beyond the stream's
// MaxBuckets counts as refused and is answered DENY_ALL; a grid that
// fails counts its errors, and the bucket gets no assignment it did not
// pay for.
func TestStatsRefusedAndGridErrors(t *testing.T) {
	f := newFleet(t, tenantRules, Options{MaxBuckets: 1})
	st := &failingStore{Store: memstore.New(memstore.WithClock(f.clk))}
	f.srv.opts.Manager = bucketgrid.NewManager(cas.New(st, cas.WithClock(f.clk)), bucketgrid.WithEagerConfig())
	e := f.envoy("fleet")
	e.decide(map[string]string{"other": "x"})
	e.decide(tenant)
	f.settle()
	s := f.srv.Stats()
	if s.Refused.StreamLimit != 1 || s.Actions.DenyAll != 1 || s.Actions.AllowAll != 1 {
		t.Fatalf("%+v, want one refused (DENY_ALL) and one ALLOW_ALL", s)
	}
	st.fail.Store(true)
	e2 := f.envoy("fleet")
	e2.decide(tenant)
	f.settle()
	s = f.srv.Stats()
	if s.GridErrors == 0 || s.Actions.TokenBucket != 0 || s.TokensPaid != 0 {
		t.Fatalf("with the grid failing: %d grid errors, %d token buckets sent, %d tokens paid; want errors, no token bucket, nothing paid",
			s.GridErrors, s.Actions.TokenBucket, s.TokensPaid)
	}
	if a, _ := e2.assignment(tenant); a != nil {
		t.Fatalf("the Envoy holds %v without a grid to pay for it", a)
	}
}

// failingStore is a memory store whose every call fails while fail is set.
type failingStore struct {
	cas.Store
	fail atomic.Bool
}

var errStoreDown = errors.New("store down")

func (s *failingStore) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	if s.fail.Load() {
		return nil, 0, false, errStoreDown
	}
	return s.Store.Get(ctx, key)
}

func (s *failingStore) Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (bool, error) {
	if s.fail.Load() {
		return false, errStoreDown
	}
	return s.Store.Insert(ctx, key, data, ttl)
}
