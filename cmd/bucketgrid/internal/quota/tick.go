package quota

import (
	"context"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/bucketgrid/bucketgrid/policy"
)

// tickWorkers bounds the pools settled at once in a period.
const tickWorkers = 8

// tick starts a period: buckets rebound when the configuration changed,
// blanket assignments renewed (or abandoned when idle), every pool
// rebalanced and its assignments renewed, one response per stream.
func (s *Server) tick(ctx context.Context) {
	now := s.opts.Clock.Now()
	next := now + s.period
	cfg := s.opts.Config()
	acts := map[*stream][]*rlqspb.RateLimitQuotaResponse_BucketAction{}

	s.mu.Lock()
	s.next = next
	for st := range s.streams {
		st.subs = shrink(st.subs, &st.subsPeak)
		for _, sb := range st.subs {
			if sb.cfg != cfg {
				s.rebind(sb, cfg, now)
			}
			if sb.pool != nil {
				continue
			}
			if now-sb.lastActive >= int64(s.opts.IdleAfter) {
				s.untrack(sb)
				s.counts.abandonedIdle.Add(1)
				acts[st] = append(acts[st], abandonAction(sb.id))
				continue
			}
			acts[st] = append(acts[st], blanketAction(sb.id, sb.b.kind == allowAll, s.opts.TTL))
		}
	}
	pools := make([]*pool, 0, len(s.pools))
	for key, p := range s.pools {
		if len(p.members) == 0 && p.debt <= 0 {
			delete(s.pools, key)
			continue
		}
		pools = append(pools, p)
	}
	s.pools = shrink(s.pools, &s.poolsPeak)
	s.ghostSet = shrink(s.ghostSet, &s.ghostsPeak)
	s.mu.Unlock()

	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, tickWorkers)
	for _, p := range pools {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out := s.settle(ctx, p, nil, now, next)
			mu.Lock()
			for _, a := range out {
				acts[a.st] = append(acts[a.st], a.act)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	for st, a := range acts {
		s.push(st, a)
	}
}

// releaseAfter bounds how long the server holds a bucket after the last
// report that named it on a stream that then closed: its assignment runs
// until it expires on its Envoy (TTL after it was sent, plus Delivery),
// and the first period that starts after that forgets it, and its pool
// when no other Envoy shares it.
func (s *Server) releaseAfter() time.Duration {
	return s.opts.TTL + s.opts.Delivery + s.opts.Period
}

// shrinkMin is the fewest entries a map must have held to be rebuilt by
// shrink.
const shrinkMin = 1024

// shrink returns m, or a copy of it once it holds less than a quarter of
// the most it held (*peak, which it updates): a Go map keeps the room of
// the most entries it ever held, so a table a flood filled would hold the
// flood's memory after its buckets are released.
func shrink[K comparable, V any](m map[K]V, peak *int) map[K]V {
	*peak = max(*peak, len(m))
	if *peak < shrinkMin || len(m) >= *peak/4 {
		return m
	}
	c := make(map[K]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	*peak = len(m)
	return c
}

// rebind moves sb to its binding under cfg; s.mu must be held. Leaving a
// pool credits it with what sb's token bucket was paid for beyond the
// replacement's arrival (its pool gives it back at its next settle).
func (s *Server) rebind(sb *sub, cfg *policy.Rules, now int64) {
	old := sb.b
	nb := bind(cfg, sb.st.domain, sb.id.GetBucket(), s.opts.Period)
	sb.cfg = cfg
	if nb.kind == old.kind && nb.key == old.key {
		sb.b = nb
		if sb.pool != nil {
			sb.pool.b = nb
		}
		return
	}
	if sb.pool != nil {
		sb.pool.debt -= s.credit(sb, now)
		delete(sb.pool.members, sb)
		sb.pool = nil
		sb.kind, sb.g, sb.max, sb.paid = unassigned, 0, 0, 0
	}
	s.bindSub(sb, cfg)
}
