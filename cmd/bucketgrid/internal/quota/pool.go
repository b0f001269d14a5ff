package quota

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/policy"
)

// assigned is what an Envoy holds for a limited bucket.
type assigned uint8

const (
	unassigned     assigned = iota
	bucketAssigned          // a token bucket of g tokens per period
	deniedAssigned          // DENY_ALL: nothing left to share
)

// sub is one bucket one Envoy (one stream) reports. Guarded by Server.mu.
type sub struct {
	st  *stream
	id  *rlqspb.BucketId
	key string
	cfg *policy.Rules // the configuration b was bound under
	b   binding
	// pool is the grid bucket's pool (limited)
	pool *pool

	// demand: requests (allowed and denied) per second, from reports
	pending    uint64  // saturating
	lastReport int64   // of the last demand sample
	lastSeen   int64   // of the last report
	rate       float64 // < 0 until measured
	lastActive int64

	// the assignment (limited)
	kind  assigned
	g     int64 // tokens per period
	max   int64 // the Envoy's max_tokens
	paid  int64 // the Envoy's supply at g is paid for through this time
	sent  int64 // when the assignment was last sent
	ghost bool  // the stream closed; the assignment runs until it expires
	fresh bool  // the Envoy (re)created its bucket: the next assignment is new
	// freshAt is when a re-creation was last answered; seq the stream's
	// report that last answered it
	freshAt int64
	seq     uint64
	cost    int64 // subCost, counted in Server.tracked
	// prev and next link the stream's subs by recent activity (room.go)
	prev, next *sub
}

// observe counts n requests reported at now. A report less than half a
// period after the previous one (the subscription and the first periodic
// report) is added to the next sample.
func (sb *sub) observe(n uint64, now, period int64) {
	sb.lastSeen = now
	if n > 0 {
		sb.lastActive = now
	}
	sb.pending = satAdd(sb.pending, n)
	dt := now - sb.lastReport
	if dt < period/2 {
		return
	}
	sample := float64(sb.pending) / (float64(dt) / 1e9)
	if sb.rate < 0 {
		sb.rate = sample
	} else {
		sb.rate = (sb.rate + sample) / 2
	}
	sb.pending, sb.lastReport = 0, now
}

// headroom over the measured demand, so that growth shows in the next
// report (denied requests are reported too, so demand is seen in full).
const headroom = 1.2

// want is the tokens per period sb asks for: fair (an even share) until its
// demand is measured, then its demand with headroom.
func (sb *sub) want(period int64, fair int64) int64 {
	if sb.rate < 0 {
		return max(fair, 1)
	}
	w := sb.rate * float64(period) / 1e9 * headroom
	if w >= math.MaxInt32 {
		return math.MaxInt32
	}
	return int64(math.Ceil(w)) + 1
}

// pool is the Envoys sharing one grid bucket.
type pool struct {
	b       binding
	members map[*sub]struct{}
	// debt is what the pool owes the grid bucket (negative: what it holds
	// back): ghosts' supply the bucket could not cover yet.
	debt int64
	// reserve is tokens taken from the grid bucket and not yet assigned:
	// the refill drain collects between periods, so that a period's
	// assignments can be paid for even when the bucket holds less than a
	// period of its rate
	reserve   int64
	nextDrain int64
	busy      sync.Mutex // one settle or drain at a time
}

// change is one sub's planned assignment.
type change struct {
	sb      *sub
	kind    assigned
	abandon bool
	idle    bool // abandon: no request for IdleAfter (else: no longer reported)
	ghost   bool // a ghost's supply through the period: paid, not sent
	// ghostCost is what that supply costs (counted in plan's ghosts)
	ghostCost int64
	g, max    int64
	paid      int64
	cost      int64 // tokens to consume for it
	credit    int64 // tokens the old assignment no longer needs
}

// sendable is an action for a stream.
type sendable struct {
	st  *stream
	act *rlqspb.RateLimitQuotaResponse_BucketAction
}

// settle assigns the pool's Envoys for the period that starts at next:
// all of them (only == nil, at a period) or the new ones in only. It
// consumes from the grid bucket everything the assignments can let
// through before sending them; when the bucket has less, it tries again
// with smaller shares, down to DENY_ALL.
func (s *Server) settle(ctx context.Context, p *pool, only []*sub, now, next int64) []sendable {
	p.busy.Lock()
	defer p.busy.Unlock()
	scale := 1.0
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		changes, ghosts := s.plan(p, only, now, next, scale)
		need := ghosts
		if only == nil {
			need += p.debt
		}
		for i := range changes {
			need += changes[i].cost - changes[i].credit // ghosts' cost is in ghosts
		}
		b := p.b
		s.mu.Unlock()
		var got int64
		if need > 0 {
			s.mu.Lock()
			got = min(p.reserve, need)
			p.reserve -= got
			s.mu.Unlock()
			if got < need {
				n, err := s.take(ctx, b, need-got)
				if err != nil {
					s.mu.Lock()
					p.reserve += got
					s.mu.Unlock()
					s.opts.Logger.Warn("rate limit quota: grid bucket unavailable; assignments left to expire", "rule", b.path, "err", err)
					return nil
				}
				got += n
			}
			if got < need && attempt < 2 {
				s.mu.Lock()
				p.reserve += got
				s.mu.Unlock()
				scale = 0.9 * float64(got) / float64(need)
				if attempt == 1 {
					scale = 0
				}
				continue
			}
		}
		s.mu.Lock()
		if only == nil {
			p.debt = 0
		}
		switch {
		case need > got:
			p.debt += need - got
		case need < 0:
			p.reserve -= need
		}
		out := s.apply(p, changes, now)
		excess := p.reserve - 2*p.b.perPeriod
		if excess > 0 {
			p.reserve -= excess
		}
		s.mu.Unlock()
		s.give(ctx, b, excess)
		return out
	}
}

// drain takes, for every pool due, the grid bucket's refill into its
// reserve, up to what the pool's Envoys want for a period with a fifth
// more: a bucket that holds less than a period of its rate would
// otherwise lose refill to its cap between periods.
func (s *Server) drain(ctx context.Context) {
	now := s.opts.Clock.Now()
	s.mu.Lock()
	var due []*pool
	for _, p := range s.pools {
		if p.nextDrain <= now && p.b.fillTime > 0 && p.b.fillTime < 2*s.period {
			due = append(due, p)
		}
	}
	s.mu.Unlock()
	for _, p := range due {
		s.drainPool(ctx, p, now)
	}
}

func (s *Server) drainPool(ctx context.Context, p *pool, now int64) {
	p.busy.Lock()
	defer p.busy.Unlock()
	s.mu.Lock()
	p.nextDrain = now + min(max(p.b.fillTime/2, int64(100*time.Millisecond)), s.period)
	var wants int64
	fair := p.b.perPeriod / int64(max(len(p.members), 1))
	for sb := range p.members {
		if !sb.ghost {
			wants += sb.want(s.period, fair)
		}
	}
	room := min(wants, p.b.perPeriod)*6/5 - p.reserve
	b := p.b
	s.mu.Unlock()
	if room <= 0 {
		return
	}
	got, err := s.take(ctx, b, room)
	if err != nil {
		return // the next settle reports it
	}
	s.mu.Lock()
	p.reserve += got
	s.mu.Unlock()
}

// plan computes the changes of one settle; s.mu must be held. ghosts is
// the cost of the supply of ghosts through the next period.
func (s *Server) plan(p *pool, only []*sub, now, next int64, scale float64) (changes []change, ghosts int64) {
	end := next + s.delivery // every supply must be paid through here
	capacity := int64(float64(p.b.perPeriod) * scale)
	var live []*sub
	for sb := range p.members {
		if !sb.ghost {
			live = append(live, sb)
			continue
		}
		if only != nil {
			continue
		}
		gEnd := min(end, sb.sent+s.ttl+s.delivery)
		if gEnd <= sb.paid {
			changes = append(changes, change{sb: sb, ghost: true, paid: sb.paid})
			continue
		}
		c := mulDiv(sb.g, gEnd-sb.paid, s.period, true)
		ghosts += c
		changes = append(changes, change{sb: sb, ghost: true, ghostCost: c, paid: sb.paid + mulDiv(c, s.period, sb.g, false)})
	}
	fair := p.b.perPeriod / int64(max(len(live), 1))
	if only != nil {
		for _, sb := range only {
			if sb.ghost || sb.pool != p {
				continue
			}
			t := int64(float64(min(sb.want(s.period, fair), fair)) * scale)
			changes = append(changes, s.changeTo(sb, t, now, end))
		}
		return changes, 0
	}
	slices.SortFunc(live, func(a, b *sub) int { return compareKeys(a, b) })
	var active []*sub
	for _, sb := range live {
		// Envoy reports every bucket it holds every 5 s: one unreported
		// for two periods is gone (an abandon crossed its report)
		if idle := now-sb.lastActive >= int64(s.opts.IdleAfter); idle || now-sb.lastSeen > 2*s.period {
			changes = append(changes, change{sb: sb, abandon: true, idle: idle, credit: s.credit(sb, now)})
			continue
		}
		active = append(active, sb)
	}
	// an Envoy not measured yet asks for what the measured ones ask on
	// average, at least an even share: an even share of the capacity
	// against the others' demands would give a newcomer to a saturated
	// bucket a fraction of its part until its first periodic report
	unmeasured := fair
	var measured, count int64
	// and no Envoy asks for more than the whole capacity: a demand is a
	// client's claim, and one of 2^64 requests must not take the others'
	// parts
	for _, sb := range active {
		if sb.rate >= 0 {
			measured += min(sb.want(s.period, 0), p.b.perPeriod)
			count++
		}
	}
	if count > 0 {
		unmeasured = max(fair, measured/count)
	}
	wants := make([]int64, len(active))
	for i, sb := range active {
		wants[i] = min(sb.want(s.period, unmeasured), p.b.perPeriod)
	}
	targets := divide(capacity, wants)
	keepClose(active, targets, capacity)
	for i, sb := range active {
		changes = append(changes, s.changeTo(sb, targets[i], now, end))
	}
	return changes, ghosts
}

// compareKeys orders subs by stream and bucket, so a period's plan does not
// depend on map order.
func compareKeys(a, b *sub) int {
	if a.key != b.key {
		if a.key < b.key {
			return -1
		}
		return 1
	}
	return int(a.lastReport - b.lastReport)
}

// keepClose keeps an Envoy's current rate where the new target is within
// a tenth of it, as long as the targets still fit capacity: an Envoy
// replaces its token bucket whenever the numbers change, and each
// replacement costs its initial tokens.
func keepClose(subs []*sub, targets []int64, capacity int64) {
	var sum int64
	var above []int // kept above their target
	orig := slices.Clone(targets)
	for i, sb := range subs {
		if sb.kind == bucketAssigned && sb.g > 0 && targets[i] > 0 && abs(targets[i]-sb.g) <= max(1, targets[i]/10) {
			if sb.g > targets[i] {
				above = append(above, i)
			}
			targets[i] = sb.g
		}
		sum += targets[i]
	}
	slices.SortFunc(above, func(a, b int) int { return int((targets[b] - orig[b]) - (targets[a] - orig[a])) })
	for _, i := range above {
		if sum <= capacity {
			break
		}
		sum -= targets[i] - orig[i]
		targets[i] = orig[i]
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// changeTo plans sb's assignment of t tokens per period (0: DENY_ALL),
// paid through end.
func (s *Server) changeTo(sb *sub, t, now, end int64) change {
	c := change{sb: sb, g: t}
	switch {
	case t > 0 && sb.kind == bucketAssigned && sb.g == t && !sb.fresh:
		// the same assignment again: Envoy keeps its bucket and its TTL
		// restarts; pay the extension
		c.kind, c.max, c.paid = bucketAssigned, sb.max, sb.paid
		if end > sb.paid {
			c.cost = mulDiv(t, end-sb.paid, s.period, true)
			c.paid = sb.paid + mulDiv(c.cost, s.period, t, false)
		}
	case t > 0:
		// a new bucket: its initial tokens and its supply from now
		c.kind = bucketAssigned
		c.max = max(1, mulDiv(t, int64(s.opts.Burst), s.period, true))
		supply := mulDiv(t, end-now, s.period, true)
		c.cost = supply + s.initial(sb, c.max, now)
		c.paid = now + mulDiv(supply, s.period, t, false)
		c.credit = s.credit(sb, now)
	default:
		c.kind = deniedAssigned
		c.credit = s.credit(sb, now)
	}
	return c
}

// initial is what a new token bucket of maxTokens for sb may hold that was
// not paid for yet. Envoy starts a replacing token bucket with the same
// ratio of remaining tokens to max_tokens as the one it replaces
// (global_client_impl.cc, createTokenBucketFromAction), and the remaining
// tokens were paid with the old bucket: so a replacement holds at most
// maxTokens − the old max_tokens more than was paid, nothing when it is
// smaller. A bucket Envoy holds no live token bucket for (new, re-created,
// expired by the time the answer arrives) starts full.
func (s *Server) initial(sb *sub, maxTokens, now int64) int64 {
	if sb.kind != bucketAssigned || sb.g <= 0 || sb.max <= 0 || sb.fresh || sb.sent+s.ttl <= now+s.delivery {
		return maxTokens
	}
	return max(0, maxTokens-sb.max)
}

// credit is what sb's current token bucket was paid for beyond the moment a
// replacement sent now reaches its Envoy; negative when a late period left
// its supply unpaid until then.
func (s *Server) credit(sb *sub, now int64) int64 {
	from := now + s.delivery
	switch {
	case sb.kind != bucketAssigned || sb.g <= 0:
		return 0
	case sb.paid >= from:
		return mulDiv(sb.g, sb.paid-from, s.period, false)
	}
	return -mulDiv(sb.g, from-sb.paid, s.period, true)
}

// apply records changes and returns their actions; s.mu must be held. A
// sub whose stream closed meanwhile keeps its old assignment: what its
// change paid and credited is settled through the pool's debt.
func (s *Server) apply(p *pool, changes []change, now int64) []sendable {
	out := make([]sendable, 0, len(changes))
	for i := range changes {
		c := &changes[i]
		sb := c.sb
		if c.ghost {
			if sb.pool != p {
				// evicted meanwhile, all it may spend charged then: what
				// this settle paid for it is the pool's
				p.debt -= c.ghostCost
				continue
			}
			sb.paid = c.paid
			if sb.sent+s.ttl+s.delivery <= now {
				delete(p.members, sb) // expired on its Envoy: nothing left to pay
				sb.pool = nil
				s.dropGhost(sb)
				s.untrack(sb)
				s.counts.expired.Add(1)
			}
			continue
		}
		if sb.ghost || sb.pool != p {
			p.debt += c.credit - c.cost
			continue
		}
		if c.abandon {
			if c.idle {
				s.counts.abandonedIdle.Add(1)
			} else {
				s.counts.abandonedUnreported.Add(1)
			}
			delete(p.members, sb)
			s.untrack(sb)
			sb.pool = nil
			out = append(out, sendable{sb.st, abandonAction(sb.id)})
			continue
		}
		sb.kind, sb.g, sb.max, sb.paid, sb.sent, sb.fresh = c.kind, c.g, c.max, c.paid, now, false
		if c.kind == bucketAssigned {
			out = append(out, sendable{sb.st, tokenBucketAction(sb.id, c.g, c.max, s.opts.Period, s.opts.TTL)})
		} else {
			sb.g, sb.max, sb.paid = 0, 0, 0
			out = append(out, sendable{sb.st, blanketAction(sb.id, false, s.opts.TTL)})
		}
	}
	return out
}

// take consumes up to n tokens from b's grid bucket and returns how many it
// got. A fixed window's reserved tokens mean "over the limit" to the RLS
// (policy.Rule.Reserved), so a take that reaches into them gives them back.
func (s *Server) take(ctx context.Context, b binding, n int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	h := s.handle(b)
	ops := []wire.Op{{Kind: wire.OpTryConsumeAsMuchAsPossible, Tokens: n}}
	if b.window {
		ops = append(ops, wire.Op{Kind: wire.OpAvailableTokens})
	}
	res, _, err := h.Execute(ctx, ops...)
	if err != nil {
		s.counts.gridErrors.Add(1)
		return 0, err
	}
	got := res[0].Tokens
	if back := min(b.reserved-res[len(res)-1].Tokens, got); b.window && back > 0 {
		got -= back
		if _, _, err := h.Execute(ctx, wire.Op{Kind: wire.OpAddTokens, Tokens: back}); err != nil {
			s.counts.gridErrors.Add(1)
			s.opts.Logger.Warn("rate limit quota: giving a window's reserved tokens back failed", "rule", b.path, "err", err)
		}
	}
	s.counts.paid.Add(got)
	return got, nil
}

// give returns n tokens the pool took but does not need (capped at the
// bucket's capacity, so giving back never mints).
func (s *Server) give(ctx context.Context, b binding, n int64) {
	if n <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if _, _, err := s.handle(b).Execute(ctx, wire.Op{Kind: wire.OpAddTokens, Tokens: n}); err != nil {
		s.counts.gridErrors.Add(1)
		s.opts.Logger.Warn("rate limit quota: giving tokens back failed", "rule", b.path, "err", err)
		return
	}
	s.counts.returned.Add(n)
}

func (s *Server) handle(b binding) interface {
	Execute(context.Context, ...wire.Op) ([]wire.Result, int, error)
} {
	cfg := b.cfg
	return s.opts.Manager.Bucket(b.key, func(context.Context) (core.Config, error) { return cfg, nil })
}
