package httplimit

import (
	"context"
	"errors"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/localmap"
	"github.com/bucketgrid/bucketgrid/policy"
)

// Plan returns the configuration of a client's bucket from the client's key:
// per-client plans (10 requests a minute on the free plan, 1,000 on the paid
// one) are decided here. It is called only when a bucket must be created, so
// it may look the plan up somewhere slow. Put whatever decides the plan into
// the key (KeyFunc), so that a client whose plan changes gets a new bucket.
type Plan func(key string) (core.Config, error)

// StaticPlan returns a Plan giving every client its own bucket of cfg.
func StaticPlan(cfg core.Config) Plan {
	return func(string) (core.Config, error) { return cfg, nil }
}

// Buckets is where the middleware's buckets come from: it takes cost tokens
// from the bucket of key and reports what the headers need. NewLocal and
// NewManaged implement it; implement it yourself to limit with anything else.
// Take must be safe for concurrent use and should honour ctx.
type Buckets interface {
	// Take takes cost (≥ 1) tokens from key's bucket if it has them, and
	// reports the outcome either way. An error means the bucket could not
	// be consulted: the middleware then fails open or closed.
	Take(ctx context.Context, key string, cost int64) (Usage, error)
}

// Usage is the outcome of one Take.
type Usage struct {
	// Probe is the decision exactly as core computed it: Consumed, the
	// remaining tokens (the minimum over bandwidths), and the waits.
	Probe core.Probe
	// Config is the configuration of the bucket; its bandwidths become the
	// items of RateLimit-Policy. An empty Config suppresses the policy
	// headers.
	Config core.Config
	// ConfigVersion is the stored configuration version of the bucket that
	// decided (see bucketgrid.WithConfigVersion): with implicit replacement,
	// which version of a plan answered. 0 without versions and for NewLocal.
	ConfigVersion int64
	// Bands, when not nil, holds one Band per bandwidth of Config, in order.
	// When nil, only the minimum over bandwidths is known (Probe.Remaining),
	// and the headers say so (see the package documentation).
	Bands []policy.Band
	// Degraded reports a decision from a local share of the limit while the
	// backend was out (see WithDegrade); Config is then the share's.
	Degraded bool
}

// Local is Buckets over a localmap.Map: one in-process bucket per
// client key, bounded in number and expired when idle, so memory never grows
// with every client ever seen. Create it with NewLocal.
type Local struct {
	m     *localmap.Map
	clock clock.Clock
}

// NewLocal returns local per-client buckets whose configuration comes from
// plan. It takes the options WithClock, WithMaxClients and WithIdleTimeout.
func NewLocal(plan Plan, opts ...LocalOption) *Local {
	o := collect(opts, LocalOption.applyLocal)
	c := o.clock
	if c == nil {
		c = clock.Monotonic()
	}
	m := localmap.New(plan, localmap.WithClock(c), localmap.WithMaxEntries(o.maxClients), localmap.WithIdleTimeout(o.idle))
	return &Local{m: m, clock: c}
}

// Map returns the underlying map, for its Len, Remove and Sweep.
func (l *Local) Map() *localmap.Map { return l.m }

// Take takes cost tokens from key's bucket, creating the bucket from the plan
// on the key's first use. The decision and the per-bandwidth snapshot are
// taken under one acquisition of the bucket's lock.
func (l *Local) Take(ctx context.Context, key string, cost int64) (Usage, error) {
	b, err := l.m.Bucket(key)
	if err != nil {
		return Usage{}, err
	}
	v, err := b.TryConsumeAndReturnRemainingVerbose(ctx, cost)
	if err != nil {
		return Usage{}, err
	}
	d := &v.Diagnostics
	return Usage{Probe: v.Probe, Config: d.State.Config, Bands: policy.Bands(d, cost, l.clock.Now())}, nil
}

// Managed is Buckets over a bucketgrid.Manager: the client's bucket is the
// Manager's bucket of the key, shared by every process using the same store.
// Create it with NewManaged.
type Managed struct {
	m     *bucketgrid.Manager
	plan  Plan
	clock clock.Clock
	bopts []bucketgrid.HandleOption
}

// NewManaged returns distributed per-client buckets held by m, created from
// plan. Every Take is one request that brings back the decision and the
// bucket's per-bandwidth state together. It takes the options WithClock (the
// clock of the executing side, default clock.Wall()), WithBucketOptions and
// WithDegrade.
func NewManaged(m *bucketgrid.Manager, plan Plan, opts ...ManagedOption) *Managed {
	o := collect(opts, ManagedOption.applyManaged)
	c := o.clock
	if c == nil {
		c = clock.Wall()
	}
	if o.degrade != nil {
		m = m.Degraded(*o.degrade)
	}
	return &Managed{m: m, plan: plan, clock: c, bopts: o.bucketOpts}
}

// Manager returns the Manager the buckets live in.
func (s *Managed) Manager() *bucketgrid.Manager { return s.m }

// Take takes cost tokens from key's distributed bucket in one request (two
// when the bucket must first be created), with the bucket's diagnostics in
// the same answer.
func (s *Managed) Take(ctx context.Context, key string, cost int64) (Usage, error) {
	if s.plan == nil {
		return Usage{}, errNoPlan
	}
	plan := s.plan
	h := s.m.Bucket(key, func(context.Context) (core.Config, error) { return plan(key) }, s.bopts...)
	v, err := h.TryConsumeAndReturnRemainingVerbose(ctx, cost)
	if err != nil {
		return Usage{}, err
	}
	d := &v.Diagnostics
	u := Usage{Probe: v.Probe, Config: d.State.Config, ConfigVersion: d.State.ConfigVersion,
		Bands: policy.Bands(d, cost, s.clock.Now()), Degraded: v.Share > 0}
	if u.Degraded {
		u.ConfigVersion = 0 // the local share's own version, not the plan's
	}
	return u, nil
}

var errNoPlan = errors.New("httplimit: no plan")
