package bucketgrid

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// degrader is a Manager's degraded mode: the breakers, the local share
// buckets and their reconciliation.
type degrader struct {
	m         *Manager
	exec      Executor
	router    router // nil: one breaker for the executor
	instances func() int
	timeout   time.Duration
	failures  int
	probe     int64 // nanoseconds of the Manager's clock
	maxKeys   int

	breakers breakers
	seen     seenMap // what the executor last said of each key's tokens

	mu     sync.Mutex
	shares map[string]*share // by store key; guarded by mu
	n      atomic.Int32      // len(shares), read without mu on the hot path

	// sweeping: a goroutine charges settled shares nobody carried;
	// sweepAgain: a share was settled since its last pass began.
	sweeping, sweepAgain atomic.Bool
	// prober: a goroutine probes on the Manager's clock while anything is
	// pending (startProber); closed: Manager.Close stopped it for good.
	prober atomic.Bool
	closed chan struct{}
	close1 sync.Once

	degraded, opened, charged, chargeFailed, dropped atomic.Int64
}

// share is the local bucket of one key while its backend is out.
type share struct {
	key       string // store key
	stored    []byte // the local bucket, core's encoding
	cfg       core.Config
	version   int64         // of cfg, for the charge
	cut       int           // instances the local bucket's configuration was cut for
	cutCfg    core.Config   // cfg.Share(cut)
	local     int64         // configuration version of the local bucket, bumped on every re-cut
	consumed  int64         // tokens consumed locally, not yet charged nor being charged
	inflight  chan struct{} // closed when the request charging this share's consumption ends; nil when none is
	settled   bool          // the executor answered since the share was last used
	settledAt int64         // clock time of settling
}

func newDegrader(m *Manager, d Degrade) *degrader {
	g := &degrader{m: m, exec: m.exec, instances: d.Instances, timeout: d.Timeout, failures: d.failures,
		probe: int64(d.probe), maxKeys: d.maxKeys, closed: make(chan struct{})}
	if g.timeout <= 0 {
		g.timeout = DefaultDegradeTimeout
	}
	if g.failures <= 0 {
		g.failures = defaultDegradeFailures
	}
	if g.probe <= 0 {
		g.probe = int64(defaultDegradeProbe)
	}
	if g.maxKeys <= 0 {
		g.maxKeys = defaultDegradeMaxKeys
	}
	if g.instances == nil {
		if lc, ok := m.exec.(liveCounter); ok {
			g.instances = lc.LiveInstances
		} else {
			g.instances = func() int { return 1 }
		}
	}
	g.router, _ = m.exec.(router)
	g.seen.init(g.maxKeys)
	return g
}

// breakerOf returns the breaker of key's route.
func (g *degrader) breakerOf(key string) *breaker {
	if g.router == nil {
		return g.breakers.of("", false)
	}
	return g.breakers.of(g.router.Route(key), true)
}

// do runs h's operations through the executor, or decides them locally when
// the route's breaker is open or the executor fails with an outage.
//
// The share it returns is Execute's: 0 when the executor answered.
func (g *degrader) do(ctx context.Context, h *Handle, ops []wire.Op, verbose bool) (wire.Response, int, error) {
	b := g.breakerOf(h.storeKey)
	if b.open.Load() {
		if now := g.m.clock.Now(); b.startProbe(now) {
			go g.probeRoute(b, h.storeKey)
		}
		return g.local(ctx, h, ops, verbose)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// the caller's deadline passed before the check began (a
		// goroutine woken late on a loaded machine): no time to ask the
		// executor, and nothing learned about the route
		return g.local(ctx, h, ops, verbose)
	}
	cut := g.cutoff(ctx)
	var s *share
	var carry int64
	if g.n.Load() > 0 && len(ops) < wire.MaxOps {
		var err error
		if s, carry, err = g.claim(ctx, h.storeKey, cut); err != nil {
			return wire.Response{}, 0, err
		}
		if !time.Now().Before(cut) {
			// the charge under way took the check's time: decided
			// locally, not counted against the route (the charge's own
			// outcome is)
			if carry > 0 {
				g.release(s, carry, false)
			}
			return g.local(ctx, h, ops, verbose)
		}
	}
	sent := ops
	if carry > 0 {
		sent = make([]wire.Op, 0, len(ops)+1)
		sent = append(sent, wire.Op{Kind: wire.OpTryConsumeAsMuchAsPossible, Tokens: carry})
		sent = append(sent, ops...)
	}
	rctx, cancel := context.WithDeadline(ctx, cut)
	var fromExec bool
	resp, err := h.remote(rctx, sent, verbose, &fromExec)
	cancel()
	if carry > 0 {
		if err == nil {
			g.charged.Add(resp.Results[0].Tokens)
			resp.Results = resp.Results[1:]
		}
		g.release(s, carry, err == nil)
	}
	if err == nil {
		b.succeeded()
		g.saw(h.storeKey, ops, &resp)
		if g.n.Load() > 0 {
			g.settle(h.storeKey)
		}
		return resp, 0, nil
	}
	// An executor that overran the cut-off (a grid member whose store
	// waits on a dead replica, or a goroutine woken late on a loaded
	// machine) may have let the caller's own deadline, later than the
	// cut-off, pass meanwhile: that is the outage's, and decided locally
	// too. A caller that canceled gets its error.
	overran := !time.Now().Before(cut) && !errors.Is(ctx.Err(), context.Canceled)
	if !fromExec || (ctx.Err() != nil && !overran) || !g.outage(err) {
		return resp, 0, err
	}
	if b.failed(h.storeKey, g.failures, g.m.clock.Now(), g.probe) {
		g.opened.Add(1)
	}
	return g.local(ctx, h, ops, verbose)
}

// cutoff returns when a check under ctx, starting now, stops waiting for
// the executor and is decided locally: after Degrade.Timeout, or after
// half the time ctx has left when that is sooner, so that the local
// decision reaches a caller with a short deadline (Envoy's 20 ms, sent as
// grpc-timeout) before it gives up, the other half left for the decision,
// the answer's way back and a loaded machine's scheduling.
func (g *degrader) cutoff(ctx context.Context) time.Time {
	now := time.Now()
	wait := g.timeout
	if dl, ok := ctx.Deadline(); ok {
		if left := max(dl.Sub(now), 0); left/2 < wait {
			wait = left / 2 // 0 once the deadline passed
		}
	}
	return now.Add(wait)
}

// claim takes the consumption of key's local share that is still to be
// charged, for the caller to charge atomically before its own operations,
// after waiting for a charge of the share already under way (until cut at
// most: one still running then is left behind): so nothing this instance
// asks of key's real bucket is decided before what it consumed locally was
// taken from it. The caller must release s when the claimed consumption is
// more than 0.
func (g *degrader) claim(ctx context.Context, key string, cut time.Time) (*share, int64, error) {
	g.mu.Lock()
	for {
		s := g.shares[key]
		if s == nil {
			g.mu.Unlock()
			return nil, 0, nil
		}
		if w := s.inflight; w != nil {
			g.mu.Unlock()
			t := time.NewTimer(time.Until(cut))
			select {
			case <-w:
				t.Stop()
			case <-ctx.Done():
				t.Stop()
				if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
					return nil, 0, ctx.Err()
				}
				// woken after the caller's deadline, itself after cut:
				// decided locally, as when the timer fires first
				return nil, 0, nil
			case <-t.C:
				// the charge is stuck (an executor past its timeout):
				// go on without it rather than wait with it
				return nil, 0, nil
			}
			g.mu.Lock()
			continue
		}
		c := s.consumed
		if c > 0 {
			s.consumed, s.inflight = 0, make(chan struct{})
		}
		g.mu.Unlock()
		return s, c, nil
	}
}

// release ends the charge of c tokens claimed from s: when it did not
// reach the executor (or may not have), they stay to be charged with the
// key's next request, so an answer lost after the charge was applied
// charges twice (refusing early, never minting).
func (g *degrader) release(s *share, c int64, charged bool) {
	g.mu.Lock()
	if !charged {
		s.consumed += c
	}
	close(s.inflight)
	s.inflight = nil
	g.mu.Unlock()
	if !charged {
		g.startProber()
	}
}

// ptrShare returns a pointer to cfg's share of n.
func ptrShare(cfg *core.Config, n int) *core.Config {
	c := cfg.Share(n)
	return &c
}

// shareOps returns ops for the local share of n instances: a configuration
// replacement (Bucket.ReplaceConfiguration, or a rule's configuration sent
// with every check) replaces the share by the new configuration's share,
// and becomes s's configuration for later re-cuts and the charge. Called
// with g.mu held.
func shareOps(s *share, ops []wire.Op, n int) []wire.Op {
	out := ops
	for i := range ops {
		if ops[i].Kind != wire.OpReplaceConfiguration || ops[i].Config == nil {
			continue
		}
		if &out[0] == &ops[0] {
			out = append([]wire.Op(nil), ops...)
		}
		s.cfg = ops[i].Config.Clone()
		cut := s.cfg.Share(n)
		out[i].Config = &cut
	}
	return out
}

// instanceCount returns the number of instances sharing the limit, ≥ 1.
func (g *degrader) instanceCount() int { return max(g.instances(), 1) }

// local decides h's operations from the key's local share with wire.Process,
// creating the share from the configuration function on first use, and
// returns the number of instances the share is cut for.
func (g *degrader) local(ctx context.Context, h *Handle, ops []wire.Op, verbose bool) (wire.Response, int, error) {
	n := g.instanceCount()
	g.mu.Lock()
	s := g.shares[h.storeKey]
	g.mu.Unlock()
	if s == nil {
		cfg, err := h.config(ctx)
		if err != nil {
			return wire.Response{}, 0, err
		}
		s = &share{key: h.storeKey, cfg: cfg, version: h.version}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.m.clock.Now()
	if cur := g.shares[h.storeKey]; cur != nil {
		s = cur // another request made it meanwhile
	} else {
		g.insert(s)
	}
	if s.settled {
		if now-s.settledAt > int64(shareMemory) { // a new outage: start afresh
			*s = share{key: s.key, cfg: s.cfg, version: s.version, consumed: s.consumed, inflight: s.inflight}
		}
		s.settled = false
	}
	req := wire.Request{Mode: wire.ModeCreateOrReplace, Ops: shareOps(s, ops, n), Verbose: verbose,
		Inheritance: core.InheritProportionally}
	if s.stored == nil || s.cut != n || !s.cutCfg.Equal(ptrShare(&s.cfg, n)) {
		s.cut, s.cutCfg = n, s.cfg.Share(n)
		s.local++ // a new version: Process replaces the configuration, tokens carried over
	}
	req.Config, req.ConfigVersion = &s.cutCfg, s.local
	if s.stored == nil {
		if seen, ok := g.seen.get(h.storeKey); ok {
			s.stored = seedShare(&s.cutCfg, s.local, seen, n)
		}
	}
	stored, changed, resp := wire.Process(s.stored, req, now)
	if err := resp.Err(); err != nil {
		return wire.Response{}, 0, fmt.Errorf("bucketgrid: local share of %s: %w", core.RedactKey(h.key), err)
	}
	if changed {
		s.stored = stored
	}
	s.consumed = max(s.consumed+consumedBy(ops, resp.Results), 0)
	g.degraded.Add(1)
	g.startProber()
	return resp, n, nil
}

// insert adds s to the shares, dropping an arbitrary one past maxKeys.
// Called with g.mu held.
func (g *degrader) insert(s *share) {
	if g.shares == nil {
		g.shares = make(map[string]*share)
	}
	if len(g.shares) >= g.maxKeys {
		for k := range g.shares {
			delete(g.shares, k)
			g.dropped.Add(1)
			break
		}
	}
	g.shares[s.key] = s
	g.n.Store(int32(len(g.shares)))
}

// consumedBy returns the tokens that ops took (positive) or gave back
// (negative) according to their results.
func consumedBy(ops []wire.Op, results []wire.Result) int64 {
	var n int64
	for i := range ops {
		op, r := &ops[i], &results[i]
		switch op.Kind {
		case wire.OpTryConsume, wire.OpTryConsumeAndReturnRemaining, wire.OpConsumeIgnoringRateLimits, wire.OpReserve:
			if r.OK {
				n += op.Tokens
			}
		case wire.OpTryConsumeAsMuchAsPossible:
			n += r.Tokens
		case wire.OpAddTokens, wire.OpForceAddTokens:
			n -= op.Tokens
		}
	}
	return n
}

// shareMemory is how long a local share outlives the executor's answer: a
// key that must be decided locally again within it goes on from the share's
// state (its consumption so far charged already), so that a backend coming
// and going, as a grid's keys do while a crashed member's are handed over,
// never hands out a full share at each return. Past it, a new outage starts
// from a full share.
const shareMemory = time.Minute

// settle marks key's local share, if any, settled: the executor answered
// for key again. What it consumed locally goes with the key's next request
// (claim); a sweep charges it if none comes soon, started here or by the
// prober (probeLoop) when no request comes at all.
func (g *degrader) settle(key string) {
	now := g.m.clock.Now()
	g.mu.Lock()
	left := false
	if s := g.shares[key]; s != nil {
		left = g.settle1(s, now)
	}
	g.mu.Unlock()
	if left {
		g.startSweep()
	}
}

// settleAll marks every local share settled: a probe was answered.
func (g *degrader) settleAll() {
	now := g.m.clock.Now()
	g.mu.Lock()
	left := false
	for _, s := range g.shares {
		left = g.settle1(s, now) || left
	}
	g.mu.Unlock()
	if left {
		g.startSweep()
	}
}

// settle1 marks s settled at now, reporting whether consumption of it is
// left to charge; a share settled longer than shareMemory ago, with
// nothing left to charge, is forgotten. Called with g.mu held.
func (g *degrader) settle1(s *share, now int64) bool {
	if !s.settled {
		s.settled, s.settledAt = true, now
	} else if now-s.settledAt > int64(shareMemory) && s.consumed == 0 && s.inflight == nil {
		delete(g.shares, s.key)
		g.n.Store(int32(len(g.shares)))
		return false
	}
	return s.consumed > 0
}

// startSweep makes a goroutine charge, after Degrade.Timeout, the shares
// whose consumption no request carried meanwhile, unless one runs
// already (it then makes another pass).
func (g *degrader) startSweep() {
	g.sweepAgain.Store(true)
	if g.sweeping.CompareAndSwap(false, true) {
		go g.sweep()
	}
}

// sweep charges the consumption left in the shares whose route's breaker
// is closed, one key at a time, a pass each time startSweep asked for one
// (the executor answered). A request for a key being
// charged waits for the charge (claim); a charge that fails stays for the
// key's next request or pass.
func (g *degrader) sweep() {
	for {
		time.Sleep(g.timeout) // a key in use carries its own charge meanwhile
		g.sweepAgain.Store(false)
		g.mu.Lock()
		var left []*share
		for _, s := range g.shares {
			if s.consumed > 0 {
				left = append(left, s)
			}
		}
		g.mu.Unlock()
		for _, s := range left {
			g.mu.Lock()
			if s.consumed <= 0 || s.inflight != nil || g.shares[s.key] != s || g.breakerOf(s.key).open.Load() {
				g.mu.Unlock()
				continue
			}
			c := charge{key: s.key, cfg: s.cfg, version: s.version, consumed: s.consumed}
			s.consumed, s.inflight = 0, make(chan struct{})
			g.mu.Unlock()
			g.release(s, c.consumed, g.charge(c))
		}
		g.sweeping.Store(false)
		if !g.sweepAgain.Load() || !g.sweeping.CompareAndSwap(false, true) {
			return
		}
	}
}

// charge is consumption to take from a real bucket.
type charge struct {
	key      string
	cfg      core.Config
	version  int64
	consumed int64
}

// charge takes what was consumed locally from the real bucket, at most
// what it holds, creating it from the configuration when it is gone (a
// crashed owner's keys): never minting. It reports whether the executor
// answered.
func (g *degrader) charge(s charge) bool {
	ctx, cancel := context.WithTimeout(context.Background(), g.backgroundWait())
	defer cancel()
	cfg := s.cfg
	req := wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &cfg, ConfigVersion: s.version, Expiry: g.m.expiry,
		Ops: []wire.Op{{Kind: wire.OpTryConsumeAsMuchAsPossible, Tokens: s.consumed}}}
	resp, err := g.exec.Execute(ctx, s.key, req)
	if err != nil || resp.Status != wire.StatusOK || len(resp.Results) != 1 {
		g.chargeFailed.Add(1)
		return false
	}
	g.charged.Add(resp.Results[0].Tokens)
	return true
}

// minBackgroundWait is the least a probe or a charge, which no caller
// waits on, waits for the executor, whatever Degrade.Timeout: a backend
// that restarted answers only after a new connection's dial and
// handshake, which a loaded machine may not finish within a short
// timeout; cut at it, every probe would cancel its own dial, and the
// breaker stay open.
const minBackgroundWait = 100 * time.Millisecond

// backgroundWait returns how long a probe or a charge waits for the
// executor: Degrade.Timeout, at least minBackgroundWait.
func (g *degrader) backgroundWait() time.Duration { return max(g.timeout, minBackgroundWait) }

// probeRoute asks the executor for key's configuration, a read that changes
// nothing, and closes b when it answers. A panic in the executor is
// recovered here, on a goroutine no caller waits on, and counts as no
// answer: it will meet a caller, who sees it raised, once the breaker
// closes for another reason.
func (g *degrader) probeRoute(b *breaker, key string) {
	answered := g.ask(key)
	b.probed(answered, g.m.clock.Now(), g.probe)
	if answered {
		g.settleAll()
	}
}

// ask reads key's configuration, within backgroundWait, and reports
// whether the executor answered (a panic in it counts as no answer).
func (g *degrader) ask(key string) (answered bool) {
	defer func() {
		if recover() != nil {
			answered = false
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), g.backgroundWait())
	defer cancel()
	_, err := g.exec.Execute(ctx, key, wire.Request{Ops: []wire.Op{{Kind: wire.OpGetConfiguration}}})
	return err == nil || !g.outage(err)
}

// startProber starts the background prober unless it runs (or the
// Manager is closed): so that a route whose backend returns is probed, and
// what its keys consumed locally charged, with no request to drive it.
func (g *degrader) startProber() {
	if !g.prober.Load() && g.prober.CompareAndSwap(false, true) {
		select {
		case <-g.closed:
			return // stays marked running: never again
		default:
		}
		go g.probeLoop()
	}
}

// probeLoop probes, every probe interval (Degrade.probe) of the Manager's clock, the open
// breakers and the routes of local shares with consumption left to charge,
// until nothing is pending or the Manager is closed.
func (g *degrader) probeLoop() {
	for {
		fire, stop := clock.After(g.m.clock, time.Duration(g.probe))
		select {
		case <-fire:
		case <-g.closed:
			stop()
			return
		}
		if g.probeOnce() {
			continue
		}
		g.prober.Store(false)
		// a consumption or an outage recorded since the pass went
		// unnoticed by its startProber: go on for it
		if !g.pending() || !g.prober.CompareAndSwap(false, true) {
			return
		}
	}
}

// probeOnce probes each open breaker whose probe is due, and the route of
// each key still to be charged whose breaker is closed (a few outages, not
// enough to open it, and no request since): an answer settles the key's
// share, so that the sweep charges it. Shares settled whose charge failed
// are swept again. It reports whether anything is still pending.
func (g *degrader) probeOnce() bool {
	now := g.m.clock.Now()
	for _, b := range g.breakers.open() {
		if k := b.key.Load(); k != nil && b.startProbe(now) {
			g.probeRoute(b, *k)
		}
	}
	g.mu.Lock()
	var unsettled []string
	retry := false
	for _, s := range g.shares {
		if s.consumed <= 0 || s.inflight != nil {
			continue
		}
		if s.settled {
			retry = true
		} else {
			unsettled = append(unsettled, s.key)
		}
	}
	g.mu.Unlock()
	if retry {
		g.startSweep()
	}
	asked := make(map[*breaker]bool) // by route: whether it answered
	for _, key := range unsettled {
		b := g.breakerOf(key)
		if b.open.Load() {
			continue // its own probe settles it
		}
		answered, ok := asked[b]
		if !ok {
			answered = g.ask(key)
			asked[b] = answered
		}
		if answered {
			g.settle(key)
		}
	}
	return g.pending()
}

// pending reports whether a breaker is open or a local share has
// consumption left to charge.
func (g *degrader) pending() bool {
	if g.breakers.openCount() > 0 {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.shares {
		if s.consumed > 0 {
			return true
		}
	}
	return false
}

// close stops the prober for good.
func (g *degrader) close() { g.close1.Do(func() { close(g.closed) }) }
