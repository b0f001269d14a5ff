package olric

import (
	"context"
	"encoding/binary"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/fence"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// LeaseConfig configures token leases (see "Token leases" in the package
// documentation). The zero value is leases off.
type LeaseConfig struct {
	// Enabled lets a member that consumes from a key often take a lease of
	// the key's tokens from its owner and decide consumptions locally, for
	// every bucket. Off by default: with leases, a greedy bucket may admit
	// up to its refill rate × Lifetime more in an interval than the exact
	// bucket would, and the remaining tokens and waits a leased decision
	// reports are those of the bucket as it was at the grant, less the
	// lease's own consumption. Every member of a cluster must run a build
	// that knows leases before any enables them (an older owner closes the
	// connection on a lease request; the caller then sends the request
	// again as a plain one).
	Enabled bool
	// Exact is Enabled for the buckets a lease keeps exact only: those
	// whose every bandwidth is refilled intervally (a fixed window), on
	// which a lease ends before the next refill, so that every interval
	// admits what it would without leases. A member asks for a lease only
	// when every configuration its request names is such a bucket's, and
	// an owner grants one only when the stored bucket and the request's
	// configurations all are; every other check goes to its owner, as
	// without leases. Remaining tokens and waits are reported as with
	// Enabled. Enabled includes these buckets; Exact without it leases
	// them alone, and grants no other lease whatever the asking member's
	// setting.
	Exact bool
	// Lifetime is the longest a lease is used, counted from when the
	// member sent the request that obtained it; a lease of a bucket with an
	// intervally refilled bandwidth also ends before that bandwidth's next
	// refill by the owner's clock, and no later than the owner's own
	// Lifetime allows. Every member of a cluster must use the same
	// Lifetime: a new owner of a partition fences leases its predecessor
	// granted by waiting out its own (see "The fence" in the package
	// documentation). Default 100ms.
	Lifetime time.Duration
	// MinDemand is how many tokens a member must have consumed from a key
	// within its last one to two Lifetimes before it asks for a lease;
	// below it every check goes to the owner, as without leases. Default 2
	// (see "Token leases" in the package documentation for what a lease
	// pays at that demand).
	MinDemand int64
	// MaxKeys bounds the keys a member tracks for leasing (their demand and
	// lease); an arbitrary one is forgotten (its lease dropped, never
	// given back) to make room. Default 65536.
	MaxKeys int
}

// on reports whether c leases any bucket.
func (c LeaseConfig) on() bool { return c.Enabled || c.Exact }

func (c LeaseConfig) withDefaults() LeaseConfig {
	if c.Lifetime <= 0 {
		c.Lifetime = 100 * time.Millisecond
	}
	if c.MinDemand <= 0 {
		c.MinDemand = 2
	}
	if c.MaxKeys <= 0 {
		c.MaxKeys = 65536
	}
	return c
}

// lease is tokens a member took from a key's owner, and the owner's bucket
// as it was just before they were taken. Decisions on a lease run core on
// view at the owner's time as the holder estimates it (never earlier than
// the owner's clock reads) and may take at most budget tokens; their
// results are those the owner would have given had the lease's checks all
// come at the instant of the grant.
type lease struct {
	view    core.State
	budget  int64  // tokens still to hand out
	sent    int64  // holder's m.mono when the request that obtained it was sent
	expires int64  // holder's m.mono from which it is not used
	at      int64  // owner's clock when it granted the lease
	owner   string // who granted it, under epoch
	epoch   uint64
	fp      uint64 // fingerprint of the configuration it was granted under
	gen     uint64 // the key's lease generation at the owner when granted
}

// valid reports whether l may still decide at holder time now.
func (l *lease) valid(now int64) bool { return l.budget > 0 && now < l.expires }

// leaseable reports whether req may be decided on a lease of view (nil:
// on some lease): it consumes, every operation is a consumption, an
// estimate, a read of the available tokens or a replacement of the
// configuration by an equal one that changes nothing, and it asks for no
// diagnostics or newer configuration. Everything else goes to the owner.
func leaseable(req *wire.Request, view *core.State) bool {
	if req.Verbose || len(req.Ops) > wire.MaxOps-2 || (view != nil && req.ConfigVersion > view.ConfigVersion) {
		return false
	}
	consumes := false
	for i := range req.Ops {
		op := &req.Ops[i]
		switch op.Kind {
		case wire.OpTryConsume, wire.OpTryConsumeAndReturnRemaining, wire.OpTryConsumeAsMuchAsPossible:
			if op.Tokens <= 0 {
				return false
			}
			consumes = true
		case wire.OpEstimate, wire.OpAvailableTokens:
		case wire.OpReplaceConfiguration:
			if view != nil && !fence.ReplacesNothing(op, view) {
				return false
			}
		default:
			return false
		}
	}
	return consumes
}

// exactUnderLease reports whether a lease keeps a bucket of cfg exact:
// every bandwidth of it is refilled intervally, so a lease, which ends
// before the next refill of any of them (windowEnd), takes only tokens
// the bucket holds until then.
func exactUnderLease(cfg *core.Config) bool {
	for i := range cfg.Bandwidths {
		if cfg.Bandwidths[i].Style == core.RefillGreedy {
			return false
		}
	}
	return len(cfg.Bandwidths) > 0
}

// namesExact reports whether req names a configuration and every one it
// names (its own, those it replaces the bucket's with) is exactUnderLease.
func namesExact(req *wire.Request) bool {
	named := false
	if req.Config != nil {
		if !exactUnderLease(req.Config) {
			return false
		}
		named = true
	}
	for i := range req.Ops {
		if c := req.Ops[i].Config; req.Ops[i].Kind == wire.OpReplaceConfiguration && c != nil {
			if !exactUnderLease(c) {
				return false
			}
			named = true
		}
	}
	return named
}

// decide runs req on l at holder time now (m.mono). It answers only when
// every consumption of req succeeded in full within l's budget; otherwise
// it changes nothing and the request goes to the owner, whose answer is
// exact (refusals are never decided on a lease). consumed is what it took.
func (l *lease) decide(req *wire.Request, now int64) (resp wire.Response, consumed int64, ok bool) {
	if !l.valid(now) || !leaseable(req, &l.view) {
		return wire.Response{}, 0, false
	}
	t := l.at + (now - l.sent)
	var saved [4]core.BandState
	keep := append(saved[:0], l.view.Bands...)
	l.view.Refill(t)
	before := l.view.Bands[0].Size
	results := make([]wire.Result, len(req.Ops))
	for i := range req.Ops {
		op := &req.Ops[i]
		if op.Kind == wire.OpReplaceConfiguration {
			results[i] = wire.Result{OK: true} // an equal configuration: a refill, done
			continue
		}
		results[i], _ = wire.Apply(&l.view, op, t)
		full := results[i].OK
		if op.Kind == wire.OpTryConsumeAsMuchAsPossible {
			full = results[i].Tokens == op.Tokens
		}
		if !full && op.Kind != wire.OpEstimate && op.Kind != wire.OpAvailableTokens {
			copy(l.view.Bands, keep)
			return wire.Response{}, 0, false
		}
	}
	consumed = before - l.view.Bands[0].Size
	if consumed <= 0 || consumed > l.budget {
		copy(l.view.Bands, keep)
		return wire.Response{}, 0, false
	}
	l.budget -= consumed
	return wire.Response{Status: wire.StatusOK, Results: results}, consumed, true
}

// windowEnd returns how long after owner time at (b refilled at at) the
// first refill of an intervally refilled bandwidth of b comes; MaxInt64
// when b has none.
func windowEnd(b *core.State, at int64) int64 {
	end := int64(math.MaxInt64)
	for i := range b.Bands {
		bw := &b.Config.Bandwidths[i]
		if bw.Style == core.RefillGreedy {
			continue
		}
		next := b.Bands[i].LastRefill + int64(bw.RefillPeriod)
		end = min(end, max(next-at, 0))
	}
	return end
}

// fingerprint identifies a bucket's configuration and its version: a
// give-back is applied only to the configuration its lease was taken
// from.
func fingerprint(b *core.State) uint64 {
	var buf [256]byte
	p := wire.AppendConfig(buf[:0], &b.Config)
	p = binary.AppendUvarint(p, uint64(b.ConfigVersion))
	return xxhash.Sum64(p)
}

// refillBound returns an upper bound of the tokens bandwidth bw (state s,
// refilled at now) can have gained by refill after since: greedy refill
// adds at most ⌈refillTokens×(now−since)/period⌉ + 1 (the +1 for the
// fraction carried from before since), intervally refill refillTokens at
// each period boundary after since, the last of which is s.LastRefill.
func refillBound(bw *core.Bandwidth, s *core.BandState, since, now int64) int64 {
	period := uint64(bw.RefillPeriod)
	if bw.Style == core.RefillGreedy {
		if now <= since {
			return 0
		}
		hi, lo := bits.Mul64(uint64(bw.RefillTokens), uint64(now)-uint64(since))
		if hi >= period {
			return math.MaxInt64
		}
		q, r := bits.Div64(hi, lo, period)
		if r != 0 {
			q++
		}
		if q >= math.MaxInt64-1 {
			return math.MaxInt64
		}
		return int64(q) + 1
	}
	if s.LastRefill <= since {
		return 0
	}
	k := (uint64(s.LastRefill)-uint64(since)-1)/period + 1
	hi, lo := bits.Mul64(k, uint64(bw.RefillTokens))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// giveBackCap returns how many of unused tokens, left of a lease granted
// at owner time since, go back into b (refilled at now) without the bucket
// ever holding more than it would have, had the lease taken only what it
// used: unused minus what refill may have added since the grant, the
// smallest over the bandwidths, at least 0. The package documentation
// ("Token leases") has the proof.
func giveBackCap(b *core.State, unused, since, now int64) int64 {
	a := unused
	for i := range b.Bands {
		a = min(a, max(0, unused-refillBound(&b.Config.Bandwidths[i], &b.Bands[i], since, now)))
	}
	return a
}

// giveBack is what a holder returns of a lease with its next lease request.
type giveBack struct {
	unused int64
	epoch  uint64
	at     int64
	fp     uint64
	gen    uint64
}

// leaseExec is the owner's part of a lease request, which execOwnerLease runs
// under the key's lock just before Process (prepare) with the owner's time.
type leaseExec struct {
	give  giveBack
	now   int64  // the owner's clock at execution
	epoch uint64 // the partition's epoch at execution
	// rec is the key's record (internal/fence); nil when the owner keeps no
	// room for it, and then nothing is granted.
	rec     *fence.Record
	noGrant bool  // the grant operation was turned into a read
	life    int64 // the Lifetime the owner allows the grant
	// exact grants only on a bucket exactUnderLease, from a request that
	// namesExact (LeaseConfig.Exact without Enabled).
	exact bool
}

// leaseRequest builds the request an owner runs for a lease: the give-back
// (an OpAddTokens prepare sizes, or a read), the caller's operations, then
// the grant (as many tokens as possible up to want; none, a read, when
// want is 0), verbose so that the answer carries the bucket.
func leaseRequest(req *wire.Request, want int64) wire.Request {
	g := *req
	g.Ops = make([]wire.Op, 0, len(req.Ops)+2)
	g.Ops = append(g.Ops, wire.Op{Kind: wire.OpAvailableTokens})
	g.Ops = append(g.Ops, req.Ops...)
	grant := wire.Op{Kind: wire.OpTryConsumeAsMuchAsPossible, Tokens: want}
	if want <= 0 {
		grant = wire.Op{Kind: wire.OpAvailableTokens} // the give-back alone
	}
	g.Ops = append(g.Ops, grant)
	g.Verbose = true
	return g
}

// prepare turns the first operation of a lease request into the capped
// give-back: only for a lease this owner granted in the partition's
// current epoch and the key's current lease generation (rec's), from a
// bucket of the same configuration, and never more than giveBackCap. It
// turns the grant into a read when the owner has no record for the key,
// a fence blocks grants at mono (m.mono), or x.exact and the bucket or a
// configuration req names is not exactUnderLease. Called with the key's
// lock held.
func (x *leaseExec) prepare(stored []byte, req *wire.Request, now int64, epoch uint64, rec *fence.Record, mono int64) {
	x.now, x.epoch, x.rec = now, epoch, rec
	req.Ops[0] = wire.Op{Kind: wire.OpAvailableTokens}
	var b core.State
	decoded := false
	decode := func() bool {
		if !decoded && len(stored) > 0 {
			var err error
			b, err = wire.DecodeState(stored)
			decoded = err == nil
		}
		return decoded
	}
	if rec == nil || mono < rec.Blocked || (x.exact && (!namesExact(req) || (len(stored) > 0 && (!decode() || !exactUnderLease(&b.Config))))) {
		x.noGrant = true
		req.Ops[len(req.Ops)-1] = wire.Op{Kind: wire.OpAvailableTokens}
	}
	if x.give.unused <= 0 || x.give.epoch != epoch || rec == nil || x.give.gen != rec.Gen || !decode() || fingerprint(&b) != x.give.fp {
		return
	}
	b.Refill(now)
	if a := giveBackCap(&b, x.give.unused, x.give.at, now); a > 0 {
		req.Ops[0] = wire.Op{Kind: wire.OpAddTokens, Tokens: a}
	}
}

// granted notes in the key's record that a lease granted by resp, the
// answer to the prepared request, may be used until mono (m.mono) plus
// life. Called with the key's lock held, after the bucket was written.
func (x *leaseExec) granted(resp *wire.Response, mono, life int64) {
	n := len(resp.Results)
	if x.noGrant || resp.Status != wire.StatusOK || n == 0 || resp.Results[n-1].Tokens <= 0 {
		return
	}
	x.life = life
	x.rec.LiveUntil = max(x.rec.LiveUntil, mono+life)
}

// grant is a lease as the owner hands it out.
type grant struct {
	granted int64
	at      int64
	epoch   uint64
	fp      uint64
	gen     uint64 // the key's lease generation
	life    int64  // the longest the holder may use it
	view    core.State
}

// execLease runs a lease request on this owner: req as execOwnerLease would,
// with the give-back before it and the grant of up to want tokens after
// it. The outcome's response answers req alone; o.grant is nil when the
// request failed or nothing could be granted.
func (m *Member) execLease(ctx context.Context, key string, h uint64, req *wire.Request, want int64, give giveBack, b bound) outcome {
	if !leaseable(req, nil) || m.leases == nil {
		// An owner with leases off keeps no records to fence them by, so
		// it grants none.
		return m.execOwnerLease(ctx, key, h, req, false, nil, b)
	}
	g := leaseRequest(req, want)
	x := leaseExec{give: give, exact: !m.leases.cfg.Enabled, noGrant: want <= 0}
	o := m.execOwnerLease(ctx, key, h, &g, false, &x, b)
	return splitLease(o, len(req.Ops), &x)
}

// splitLease separates a lease request's outcome into the answer to the
// caller's n operations and the grant.
func splitLease(o outcome, n int, x *leaseExec) outcome {
	if o.kind != frame.KindOK || o.resp.Status != wire.StatusOK || len(o.resp.Results) != n+2 {
		o.resp.Diagnostics = nil
		return o
	}
	d := o.resp.Diagnostics
	granted := o.resp.Results[n+1].Tokens
	o.resp.Results = o.resp.Results[1 : n+1]
	o.resp.Diagnostics = nil
	if d == nil || granted <= 0 || x.noGrant || x.life <= 0 {
		return o
	}
	view := d.State
	for i := range view.Bands {
		view.Bands[i].Size += granted
	}
	o.grant = &grant{granted: granted, at: x.now, epoch: x.epoch, fp: fingerprint(&view), gen: x.rec.Gen, life: x.life, view: view}
	return o
}

// appendGrant encodes a grant after the frame header of a frame.KindLeased
// answer; the response follows it.
func appendGrant(dst []byte, g *grant) []byte {
	dst = binary.AppendUvarint(dst, uint64(g.granted))
	dst = binary.AppendUvarint(dst, uint64(g.at))
	dst = binary.AppendUvarint(dst, g.epoch)
	dst = binary.AppendUvarint(dst, g.fp)
	dst = binary.AppendUvarint(dst, g.gen)
	dst = binary.AppendUvarint(dst, uint64(g.life))
	st := wire.AppendState(nil, &g.view)
	dst = binary.AppendUvarint(dst, uint64(len(st)))
	return append(dst, st...)
}

// parseGrant decodes what appendGrant wrote and returns the rest.
func parseGrant(p []byte) (*grant, []byte, error) {
	var v [7]uint64
	var err error
	for i := range v {
		if v[i], p, err = frame.Uvarint(p); err != nil {
			return nil, nil, err
		}
	}
	if v[0] == 0 || v[0] > math.MaxInt64 || v[5] == 0 || v[5] > math.MaxInt64 || v[6] > uint64(len(p)) {
		return nil, nil, frame.ErrMalformed
	}
	view, err := wire.DecodeState(p[:v[6]])
	if err != nil {
		return nil, nil, err
	}
	return &grant{granted: int64(v[0]), at: int64(v[1]), epoch: v[2], fp: v[3], gen: v[4], life: int64(v[5]), view: view}, p[v[6]:], nil
}

// appendLeaseParams encodes a lease request's want and give-back, which
// precede the core request in its payload.
func appendLeaseParams(dst []byte, want int64, g giveBack) []byte {
	dst = binary.AppendUvarint(dst, uint64(want))
	dst = binary.AppendUvarint(dst, uint64(g.unused))
	dst = binary.AppendUvarint(dst, g.epoch)
	dst = binary.AppendUvarint(dst, uint64(g.at))
	dst = binary.AppendUvarint(dst, g.fp)
	return binary.AppendUvarint(dst, g.gen)
}

// parseLeaseParams decodes what appendLeaseParams wrote.
func parseLeaseParams(p []byte) (want int64, g giveBack, rest []byte, err error) {
	var v [6]uint64
	for i := range v {
		if v[i], p, err = frame.Uvarint(p); err != nil {
			return 0, giveBack{}, nil, err
		}
	}
	if v[0] > math.MaxInt64 || v[1] > math.MaxInt64 {
		return 0, giveBack{}, nil, frame.ErrMalformed
	}
	return int64(v[0]), giveBack{unused: int64(v[1]), epoch: v[2], at: int64(v[3]), fp: v[4], gen: v[5]}, p, nil
}

// ---- holder side ----

// leaseTable is a member's leases and demand, per key.
type leaseTable struct {
	cfg    LeaseConfig
	fence  *fence.Table // the owner side: what this member granted
	shards [64]leaseShard
	// seen notes the last key checked, by hash, that has no leaseKey
	// yet (see warm): a key gets one only when it is checked again within
	// about a Lifetime, so that keys checked once cost no state.
	seen  [seenSlots]atomic.Uint64
	local atomic.Int64 // checks decided on a lease, for tests and benchmarks
}

// seenSlots is the size of leaseTable.seen. A key whose slot another key
// takes between its checks is only warm later.
const seenSlots = 1 << 14

// warm reports whether a key (hash h) that has no leaseKey was checked
// before, in the current or the previous Lifetime, by the slot of its hash,
// and notes this check at now there: the Lifetime's index above 24 bits of
// the hash that the slot's index does not use.
func (t *leaseTable) warm(h uint64, now int64) bool {
	slot := &t.seen[(h>>20)%seenSlots]
	win := uint64(now / int64(t.cfg.Lifetime))
	fp := (h >> 34) & (1<<24 - 1)
	v := slot.Load()
	if v&(1<<24-1) == fp && (v>>24 == win || v>>24+1 == win) {
		return true
	}
	slot.Store(win<<24 | fp)
	return false
}

type leaseShard struct {
	mu   sync.Mutex
	keys map[string]*leaseKey
}

// leaseKey is what a member knows of one key: its lease and its demand,
// the tokens it consumed in the current and the previous Lifetime.
type leaseKey struct {
	mu        sync.Mutex
	l         lease
	asking    bool // a lease request is in flight
	winStart  int64
	cur, prev int64
}

func newLeaseTable(cfg LeaseConfig) *leaseTable {
	t := &leaseTable{cfg: cfg}
	for i := range t.shards {
		t.shards[i].keys = map[string]*leaseKey{}
	}
	return t
}

// entry returns key's record, creating it when the key is warm (see
// warm) at now; nil for a key checked once.
func (t *leaseTable) entry(key string, h uint64, now int64) *leaseKey {
	s := &t.shards[(h>>40)%uint64(len(t.shards))]
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if e == nil {
		if !t.warm(h, now) {
			return nil
		}
		if len(s.keys) >= max(t.cfg.MaxKeys/len(t.shards), 1) {
			for k := range s.keys {
				delete(s.keys, k)
				break
			}
		}
		e = &leaseKey{}
		s.keys[key] = e
	}
	return e
}

// record counts n tokens consumed at now in e's demand. Called with e.mu
// held.
func (e *leaseKey) record(n, now, lifetime int64) {
	switch {
	case now-e.winStart >= 2*lifetime:
		e.prev, e.cur, e.winStart = 0, 0, now
	case now-e.winStart >= lifetime:
		e.prev, e.cur, e.winStart = e.cur, 0, now
	}
	e.cur += n
}

// demand returns the tokens consumed in the last one to two lifetimes.
// Called with e.mu held.
func (e *leaseKey) demand(now, lifetime int64) int64 {
	e.record(0, now, lifetime)
	return max(e.prev, e.cur)
}

// consumedBy returns the tokens resp says req consumed.
func consumedBy(req *wire.Request, resp *wire.Response) int64 {
	var n int64
	for i := range req.Ops {
		if i >= len(resp.Results) {
			break
		}
		switch req.Ops[i].Kind {
		case wire.OpTryConsume, wire.OpTryConsumeAndReturnRemaining:
			if resp.Results[i].OK {
				n += req.Ops[i].Tokens
			}
		case wire.OpTryConsumeAsMuchAsPossible:
			n += resp.Results[i].Tokens
		}
	}
	return n
}

// executeLeased runs req for key when leases apply to it: on the key's
// lease when one holds the tokens, else on the owner, asking for a lease
// with the request when this member's demand for the key is high enough.
// handled is false when leases do not apply (this member owns the key, req
// is not a consumption, or with LeaseConfig.Exact alone it names a
// configuration a lease does not keep exact, or none): the caller runs req
// as usual.
func (m *Member) executeLeased(ctx context.Context, key string, req *wire.Request) (resp wire.Response, handled bool, err error) {
	t := m.leases
	h := m.hash(key)
	owner := m.routing.current().owners[h%m.cfg.PartitionCount]
	if owner == m.name || owner == "" || !leaseable(req, nil) || (!t.cfg.Enabled && !namesExact(req)) {
		return wire.Response{}, false, nil
	}
	life := int64(t.cfg.Lifetime)
	e := t.entry(key, h, m.mono())
	if e == nil {
		return wire.Response{}, false, nil // checked once: no lease, no state
	}
	e.mu.Lock()
	now := m.mono()
	if r, n, ok := e.l.decide(req, now); ok {
		e.record(n, now, life)
		e.mu.Unlock()
		t.local.Add(1)
		return r, true, nil
	}
	demand := e.demand(now, life)
	// A lease that ended with tokens left asks again whatever the demand,
	// so that they go back: a key whose demand fell (its checks refused)
	// would otherwise hold them until the member forgets the key.
	pending := e.l.budget > 0 && e.l.owner == owner
	ask := !e.asking && (demand >= t.cfg.MinDemand || pending)
	want := 2 * demand
	if demand < t.cfg.MinDemand {
		want = 0 // only the give-back (and at most one token)
	}
	var give giveBack
	if ask {
		e.asking = true
		if pending {
			give = giveBack{unused: e.l.budget, epoch: e.l.epoch, at: e.l.at, fp: e.l.fp, gen: e.l.gen}
		}
		e.l = lease{}
	}
	e.mu.Unlock()
	var o outcome
	sent := m.mono()
	if ask {
		budget := time.Time{}
		if _, ok := ctx.Deadline(); !ok {
			budget = time.Now().Add(m.cfg.RequestTimeout)
		}
		raw := wire.AppendRequest(appendLeaseParams(nil, want, give), req)
		o = m.peers.remote(ctx, owner, frame.KindLease, key, nil, raw, remaining(ctx, budget))
	}
	if o.kind != frame.KindOK {
		// No lease asked, or anything but an answer: a plain request,
		// with its retries.
		o, err = m.do(ctx, key, req, frame.KindExecute, nil)
	}
	e.mu.Lock()
	if ask {
		e.asking = false
	}
	if err == nil {
		e.record(consumedBy(req, &o.resp), m.mono(), life)
	}
	if g := o.grant; g != nil {
		e.l = lease{view: g.view, budget: g.granted, sent: sent,
			expires: sent + min(life, g.life, windowEnd(&g.view, g.at)), at: g.at, owner: owner, epoch: g.epoch, fp: g.fp, gen: g.gen}
	}
	e.mu.Unlock()
	return o.resp, true, err
}
