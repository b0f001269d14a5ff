package quota

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bucketgrid/bucketgrid/clock"
)

// envoy is a test client that behaves as Envoy's rate_limit_quota filter
// and its global RLQS client do (read from envoyproxy/envoy,
// source/extensions/filters/http/rate_limit_quota/), on a fake clock. Each
// behaviour names the file it comes from:
//
//   - filter.cc: a request whose bucket is new is decided by
//     no_assignment_behavior (allowed unless its fallback is a blanket
//     DENY_ALL; ALLOW_ALL when unset) and asks the global client to create
//     the bucket; later requests follow the bucket's cached action, else its
//     default action (the no_assignment fallback): ALLOW_ALL, DENY_ALL, a
//     token bucket consuming one token (no partial consumption);
//     requests_per_time_unit and an unset strategy allow. Each decision
//     counts as allowed or denied in the bucket's usage.
//   - global_client_impl.cc, createBucketImpl: the first bucket ever starts
//     the stream and the report timer; a new bucket's usage starts with its
//     first request and an immediate report of that bucket alone is sent.
//   - client_impl.cc (the TLS store): the report timer fires every 5 s
//     whatever the bucket's reporting_interval says.
//   - global_client_impl.cc, onSendReportsTimer/buildReports: every cached
//     bucket is reported, its counts since its last report (reset when
//     read), time_elapsed in whole seconds; the domain on every message. A
//     closed stream is restarted first; if that fails the report is dropped
//     (its counts lost). onRemoteClose forgets the stream; the buckets and
//     their assignments stay.
//   - global_client_impl.cc, onQuotaResponseImpl: an action without a
//     bucket id or for a bucket not in the cache is ignored; abandon erases
//     the bucket; requests_per_time_unit or an unset strategy ignores the
//     action (the previous one stays); a token bucket equal to the cached one
//     (max_tokens, tokens_per_fill and only the nanos of fill_interval) keeps
//     the limiter, any other starts a new one holding max_tokens ×
//     remaining/old max_tokens of the old one, or max_tokens when there was
//     none; every accepted action restarts the expiry timer at the whole
//     seconds of assignment_time_to_live. An action with neither an
//     assignment nor an abandon replaces the bucket too, without a limiter,
//     and its TTL of 0 expires it at once.
//   - global_client_impl.cc, onActionExpirationTimer: an expired action
//     gives way to expired_assignment_behavior's fallback_rate_limit for its
//     timeout's whole seconds (a token bucket equal to the expired one
//     carries on; another starts at the expired limiter's fill ratio, as
//     above), then to the default action; without a fallback (also with
//     reuse_last_assignment, which this code does not read) straight to the
//     default action.
//   - common/common/token_bucket_impl.h, AtomicTokenBucketImpl: a
//     continuous bucket of max_tokens refilled at tokens_per_fill per whole
//     second of fill_interval (a sub-second interval divides by zero), kept
//     as the time it was empty, in float64 seconds.
type envoy struct {
	clk      *clock.Fake
	conn     grpc.ClientConnInterface
	domain   string
	noAssign *typev3.RateLimitStrategy // nil: ALLOW_ALL
	expired  *typev3.RateLimitStrategy // expired_assignment_behavior fallback
	expTTL   time.Duration

	mu         sync.Mutex
	stream     grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]
	cancel     context.CancelFunc
	gen        int // stream generation, so a dead stream's receiver forgets only itself
	timerOn    bool
	nextReport int64
	buckets    map[string]*envoyBucket

	reportsSent, received atomic.Int64
	unenforced            atomic.Int64 // requests_per_time_unit actions received (and ignored)
	allowed, denied       atomic.Int64
}

// envoyBucket is one cached bucket (quota_bucket_cache.h's CachedBucket).
type envoyBucket struct {
	id              *rlqspb.BucketId
	allowed, denied uint64
	lastReport      int64
	action          *typev3.RateLimitStrategy // nil: the default action
	tb              *envoyTokenBucket
	expiresAt       int64 // of action; 0 without
	fallbackUntil   int64 // of a fallback action; 0 without
}

const envoyReportInterval = 5 * time.Second

func newEnvoy(clk *clock.Fake, conn grpc.ClientConnInterface, domain string) *envoy {
	return &envoy{clk: clk, conn: conn, domain: domain, buckets: map[string]*envoyBucket{}}
}

// decide handles one request of bucket id at the clock's time.
func (e *envoy) decide(id map[string]string) bool {
	now := e.clk.Now()
	bid := &rlqspb.BucketId{Bucket: id}
	key := canonical(bid)
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.buckets[key]
	if b == nil {
		ok := e.noAssign.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL
		if !e.timerOn {
			e.timerOn = true
			e.nextReport = now + int64(envoyReportInterval)
			e.startStream()
		}
		b = &envoyBucket{id: bid, lastReport: now}
		if ok {
			b.allowed = 1
		} else {
			b.denied = 1
		}
		e.buckets[key] = b
		e.send(&rlqspb.RateLimitQuotaUsageReports{Domain: e.domain,
			BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{e.usage(b, now)}})
		e.count(ok)
		return ok
	}
	e.expire(b, now)
	s := b.action
	if s == nil {
		s = e.noAssign
	}
	ok := true
	switch x := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		ok = x.BlanketRule == typev3.RateLimitStrategy_ALLOW_ALL
	case *typev3.RateLimitStrategy_TokenBucket:
		ok = b.tb.consume(now)
	}
	if ok {
		b.allowed++
	} else {
		b.denied++
	}
	e.count(ok)
	return ok
}

func (e *envoy) count(ok bool) {
	if ok {
		e.allowed.Add(1)
	} else {
		e.denied.Add(1)
	}
}

// expire runs the expiry timers that fell due by now, at their own times.
func (e *envoy) expire(b *envoyBucket, now int64) {
	if b.expiresAt != 0 && now >= b.expiresAt {
		at := b.expiresAt
		b.expiresAt = 0
		if e.expired == nil {
			b.action, b.tb = nil, nil
		} else {
			if tb := e.expired.GetTokenBucket(); tb != nil && !(b.tb != nil && sameTokenBucket(b.action.GetTokenBucket(), tb)) {
				b.tb = newEnvoyTokenBucket(tb, at, b.tb)
			} else if tb == nil {
				b.tb = nil
			}
			b.action = e.expired
			b.fallbackUntil = at + int64(wholeSeconds(e.expTTL))
		}
	}
	if b.fallbackUntil != 0 && now >= b.fallbackUntil {
		b.fallbackUntil = 0
		b.action, b.tb = nil, nil
	}
}

// report runs the report timer if it fell due.
func (e *envoy) report() {
	now := e.clk.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.timerOn || now < e.nextReport {
		return
	}
	e.nextReport += int64(envoyReportInterval)
	r := &rlqspb.RateLimitQuotaUsageReports{Domain: e.domain}
	for _, b := range e.buckets {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, e.usage(b, now))
	}
	if e.stream == nil && !e.startStream() {
		return
	}
	e.send(r)
}

// usage reads and resets b's counts.
func (e *envoy) usage(b *envoyBucket, now int64) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	u := &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: b.id,
		NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied}
	u.TimeElapsed = &durationpb.Duration{Seconds: int64(time.Duration(now-b.lastReport) / time.Second)}
	b.allowed, b.denied, b.lastReport = 0, 0, now
	return u
}

// send sends r on the stream, if there is one; e.mu must be held.
func (e *envoy) send(r *rlqspb.RateLimitQuotaUsageReports) {
	if e.stream == nil {
		return
	}
	if err := e.stream.Send(r); err == nil {
		e.reportsSent.Add(1)
	}
}

// startStream opens the stream and its receiver; e.mu must be held.
func (e *envoy) startStream() bool {
	ctx, cancel := context.WithCancel(context.Background())
	st, err := rlqspb.NewRateLimitQuotaServiceClient(e.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		return false
	}
	e.gen++
	gen := e.gen
	e.stream, e.cancel = st, cancel
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				e.mu.Lock()
				if e.gen == gen {
					e.stream = nil
				}
				e.mu.Unlock()
				cancel()
				return
			}
			e.apply(resp)
		}
	}()
	return true
}

// breakStream drops the stream as a network failure would.
func (e *envoy) breakStream() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cancel != nil {
		e.cancel()
	}
	e.stream = nil
	e.gen++
}

func (e *envoy) close() { e.breakStream() }

// apply handles one response at the clock's time.
func (e *envoy) apply(resp *rlqspb.RateLimitQuotaResponse) {
	now := e.clk.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.received.Add(1)
	for _, a := range resp.GetBucketAction() {
		if len(a.GetBucketId().GetBucket()) == 0 {
			continue
		}
		key := canonical(a.GetBucketId())
		b := e.buckets[key]
		if b == nil {
			continue
		}
		e.expire(b, now)
		if a.GetAbandonAction() != nil {
			delete(e.buckets, key)
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		if qa == nil {
			// cached as it is, without a limiter; its TTL of 0 expires
			// it at once
			b.action, b.tb = &typev3.RateLimitStrategy{}, nil
			b.fallbackUntil, b.expiresAt = 0, now
			continue
		}
		s := qa.GetRateLimitStrategy()
		switch s.GetStrategy().(type) {
		case *typev3.RateLimitStrategy_BlanketRule_:
			b.tb = nil
		case *typev3.RateLimitStrategy_TokenBucket:
			if b.tb == nil || !sameTokenBucket(b.action.GetTokenBucket(), s.GetTokenBucket()) {
				b.tb = newEnvoyTokenBucket(s.GetTokenBucket(), now, b.tb)
			}
		case *typev3.RateLimitStrategy_RequestsPerTimeUnit_:
			e.unenforced.Add(1) // "not yet supported": the previous action and its expiry stay
			continue
		default:
			continue
		}
		b.action = s
		b.fallbackUntil = 0
		b.expiresAt = now + int64(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds())*time.Second)
	}
}

// assignment returns the cached strategy of bucket id (nil: default).
func (e *envoy) assignment(id map[string]string) (s *typev3.RateLimitStrategy, known bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.buckets[canonical(&rlqspb.BucketId{Bucket: id})]
	if b == nil {
		return nil, false
	}
	e.expire(b, e.clk.Now())
	return b.action, true
}

func sameTokenBucket(a, b *typev3.TokenBucket) bool {
	return a != nil && b != nil && a.GetMaxTokens() == b.GetMaxTokens() &&
		a.GetTokensPerFill().GetValue() == b.GetTokensPerFill().GetValue() &&
		a.GetFillInterval().GetNanos() == b.GetFillInterval().GetNanos()
}

func wholeSeconds(d time.Duration) time.Duration { return d.Truncate(time.Second) }

// envoyTokenBucket is AtomicTokenBucketImpl: the time (float64 seconds)
// at which the bucket was empty.
type envoyTokenBucket struct {
	max, rate, empty float64
}

func newEnvoyTokenBucket(tb *typev3.TokenBucket, now int64, old *envoyTokenBucket) *envoyTokenBucket {
	fill := float64(tb.GetFillInterval().GetSeconds()) + float64(tb.GetFillInterval().GetNanos())/1e9
	sec := math.Trunc(fill)
	b := &envoyTokenBucket{max: float64(tb.GetMaxTokens()), rate: float64(tb.GetTokensPerFill().GetValue()) / sec}
	initial := b.max
	if old != nil {
		initial = math.Trunc(b.max * (old.remaining(now) / old.max))
	}
	b.empty = seconds(now) - initial/b.rate
	return b
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }

func (b *envoyTokenBucket) remaining(now int64) float64 {
	return math.Min(b.max, (seconds(now)-b.empty)*b.rate)
}

func (b *envoyTokenBucket) consume(now int64) bool {
	t := b.remaining(now)
	if t < 1 {
		return false
	}
	b.empty = seconds(now) - (t-1)/b.rate
	return true
}
