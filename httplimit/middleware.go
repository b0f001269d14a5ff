package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/internal/header"
	"github.com/bucketgrid/bucketgrid/localmap"
	"github.com/bucketgrid/bucketgrid/policy"
)

// Option configures the middleware (New). The buckets' constructors take
// options of their own types, so that the compiler refuses an option given
// to a constructor that does not take it.
type Option func(*options)

type (
	// LocalOption configures NewLocal: WithClock, WithMaxClients,
	// WithIdleTimeout.
	LocalOption interface{ applyLocal(*options) }
	// ManagedOption configures NewManaged: WithClock, WithBucketOptions,
	// WithDegrade.
	ManagedOption interface{ applyManaged(*options) }
	// SourceOption is an option of NewLocal and NewManaged alike
	// (WithClock).
	SourceOption interface {
		LocalOption
		ManagedOption
	}
)

type (
	localOption   func(*options) // NewLocal
	managedOption func(*options) // NewManaged
	sourceOption  func(*options) // both
)

func (f localOption) applyLocal(o *options)     { f(o) }
func (f managedOption) applyManaged(o *options) { f(o) }
func (f sourceOption) applyLocal(o *options)    { f(o) }
func (f sourceOption) applyManaged(o *options)  { f(o) }

type options struct {
	// middleware
	key      KeyFunc
	cost     func(*http.Request) int64
	skip     []func(*http.Request) bool
	only     []string
	except   []string
	headers  policy.Headers
	timeout  time.Duration
	failOpen bool
	onError  func(*http.Request, error)
	problem  string

	// sources
	clock      clock.Clock
	maxClients int
	idle       time.Duration
	bucketOpts []bucketgrid.HandleOption
	degrade    *bucketgrid.Degrade
}

// DefaultTimeout is how long the middleware waits for a bucket by default
// before failing open or closed.
const DefaultTimeout = 250 * time.Millisecond

// collect applies opts, each with apply, over the defaults.
func collect[O any](opts []O, apply func(O, *options)) options {
	o := options{
		key:        ClientIP{}.Key,
		headers:    policy.IETFHeaders,
		timeout:    DefaultTimeout,
		failOpen:   true,
		problem:    "about:blank",
		maxClients: localmap.DefaultMaxEntries,
	}
	for _, opt := range opts {
		apply(opt, &o)
	}
	return o
}

// applyOption applies one middleware option.
func applyOption(opt Option, o *options) { opt(o) }

// WithKey sets how a request is mapped to its client's bucket (New). The
// default is ClientIP{}.Key: the immediate peer's address (IPv6 clients by
// their /64), no proxy trusted. A KeyFunc error is answered 400 with a fixed
// message, never the error's text, which goes to the WithErrorHook function.
func WithKey(k KeyFunc) Option { return func(o *options) { o.key = k } }

// WithCost sets how many tokens a request takes (New); the default is 1. A
// cost below 1 is taken as 1.
func WithCost(cost func(*http.Request) int64) Option {
	return func(o *options) { o.cost = cost }
}

// WithSkip lets requests for which skip returns true through unlimited and
// without headers (New). Several WithSkip combine: any may skip.
func WithSkip(skip func(*http.Request) bool) Option {
	return func(o *options) { o.skip = append(o.skip, skip) }
}

// WithExcept lets requests matching any of the http.ServeMux patterns
// through unlimited (New): health checks, documentation.
//
//	httplimit.WithExcept("GET /healthz", "/docs/")
//
// New panics on an invalid pattern, as ServeMux.Handle does.
func WithExcept(patterns ...string) Option {
	return func(o *options) { o.except = append(o.except, patterns...) }
}

// WithOnly limits only requests matching one of the http.ServeMux patterns
// (New); the others go through unlimited. Exceptions still apply.
//
//	httplimit.WithOnly("/v1/")
func WithOnly(patterns ...string) Option {
	return func(o *options) { o.only = append(o.only, patterns...) }
}

// WithHeaders selects the rate-limit header fields (New), as package policy
// renders them for every front door: policy.IETFHeaders (the default) with
// one item per bandwidth, policy.XRateLimitHeaders and policy.DraftHeaders
// for the tightest bandwidth. Zero writes none; Retry-After is written on
// 429 regardless.
func WithHeaders(h policy.Headers) Option { return func(o *options) { o.headers = h } }

// WithTimeout bounds the time the middleware waits for a distributed bucket
// (New): the bucket is consulted under a context with a deadline d from now,
// and the middleware waits at most d plus a grace of d/8 (at most 50 ms) for
// the answer, in which a backend that honours its context says why it
// stopped; then the request fails open or closed (WithFailOpen), even if the
// backend ignores its context. The default is DefaultTimeout; d ≤ 0 waits as
// long as the request's own context allows. Local buckets never wait.
//
// Choose d against the backend's own windows of unavailability. When a
// grid/olric member crashes, the keys it owned (about 1/N of them with N
// members) cannot be decided until memberlist declares it dead and the new
// owner takes over (grid/olric's README, "Faults on a real network", has
// the measured window), and a member that joins holds the partitions it
// takes over for its HandoverGrace (1.5 s by default). Both can be longer
// than DefaultTimeout, so for that long those clients get the failure
// mode: unlimited with fail-open. A d above the window makes them wait
// instead.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithFailOpen says what happens when the bucket cannot be consulted because
// of an outage (New): true, the default, serves the request unlimited;
// false answers 503 with a problem+json body. Either way the failure is
// counted in Stats and passed to the WithErrorHook function.
//
// Only outages fail open: a store error, a request timed out (WithTimeout;
// see there for a grid member's crash), an executor that cannot reach the
// key's owner, a Plan error that does not wrap core.ErrInvalidKey.
// Failures a client could provoke or that no retry cures never do: a key
// the backend cannot hold (core.ErrInvalidKey, from the backend or the
// Plan) is answered 400; a corrupt stored record (core.ErrCorruptState, under
// bucketgrid.WithRecoveryFail), an invalid configuration from the Plan
// (*core.ConfigError), a request the executor refuses
// (wire.ErrInvalidRequest) and a key so contended that the executor gave up
// (cas.ErrConflict) are answered 503 whatever the mode; and a panic is
// re-raised (see Stats.Panicked).
func WithFailOpen(open bool) Option {
	return func(o *options) { o.failOpen = open }
}

// WithErrorHook calls f with each failure to consult a bucket (New), before
// the request is answered or fails open or closed, with each key the
// middleware refuses with 400 (the KeyFunc's or the backend's error: the 400
// itself carries a fixed message), and with each panic in the limiter as a
// *cas.PanicError: log it, count it by cause. f runs on the request's goroutine
// and must be safe for concurrent use.
func WithErrorHook(f func(r *http.Request, err error)) Option {
	return func(o *options) { o.onError = f }
}

// WithProblemType sets the "type" URI of the 429 problem body (New); the
// default is "about:blank".
func WithProblemType(uri string) Option {
	return func(o *options) { o.problem = uri }
}

// WithClock sets the clock of NewLocal's buckets (default
// clock.Monotonic()) or, for NewManaged, the clock of the side that executes
// the bucket (default clock.Wall()), which the RateLimit waits are measured
// against. Tests pass a *clock.Fake.
func WithClock(c clock.Clock) SourceOption {
	return sourceOption(func(o *options) { o.clock = c })
}

// WithMaxClients bounds the number of buckets NewLocal holds, evicting the
// least recently used beyond it (default localmap.DefaultMaxEntries).
// Choose it above the number of concurrently active clients.
func WithMaxClients(n int) LocalOption {
	return localOption(func(o *options) { o.maxClients = n })
}

// WithIdleTimeout drops a NewLocal bucket unused for d; choose d longer than
// the longest refill-to-full time, and a dropped bucket equals a new one.
// The default, 0, drops buckets only to stay within WithMaxClients.
func WithIdleTimeout(d time.Duration) LocalOption {
	return localOption(func(o *options) { o.idle = d })
}

// WithBucketOptions passes options to every Manager.Bucket call of
// NewManaged, e.g. bucketgrid.WithConfigVersion for implicit configuration
// replacement.
func WithBucketOptions(opts ...bucketgrid.HandleOption) ManagedOption {
	return managedOption(func(o *options) { o.bucketOpts = append(o.bucketOpts, opts...) })
}

// WithDegrade makes NewManaged's buckets decide from a local share of each
// client's limit while the backend is out, instead of failing open or
// closed: the Manager's degraded mode (see bucketgrid.Degrade), on a Manager
// derived from the one given (bucketgrid.Manager.Degraded). The headers then
// describe the local share, the decisions are counted apart
// (Stats.DegradedAllowed, Stats.DegradedLimited), and the failure mode
// (WithFailOpen) still answers the failures that are no outage and the
// outages degrade cannot decide (the plan failing). The WithTimeout
// deadline reaches the Manager, which stops waiting for the backend after
// d.Timeout (100 ms by default) or half the time that deadline leaves,
// whichever is sooner, so the local decision arrives before the
// middleware gives up.
func WithDegrade(d bucketgrid.Degrade) ManagedOption {
	return managedOption(func(o *options) { o.degrade = &d })
}

// ErrTimeout is returned (wrapped, with context.DeadlineExceeded) to the
// error hook when a bucket did not answer within the WithTimeout deadline,
// or answered with the deadline's error.
var ErrTimeout = errors.New("httplimit: bucket did not answer in time")

// Stats counts what the middleware did. Every request lands in exactly one
// counter.
type Stats struct {
	// Allowed requests took their tokens and were served.
	Allowed uint64
	// Limited requests were refused with 429.
	Limited uint64
	// DegradedAllowed and DegradedLimited requests were decided, served or
	// refused with 429, from a local share of the limit while the backend
	// was out (see WithDegrade), not by the backend: Allowed and Limited
	// count only the backend's decisions.
	DegradedAllowed uint64
	DegradedLimited uint64
	// Skipped requests were not limited (WithSkip, WithExcept, WithOnly).
	Skipped uint64
	// FailedOpen requests were served unlimited because of an outage: the
	// bucket failed or timed out (see WithFailOpen).
	FailedOpen uint64
	// FailedClosed requests were refused with 503 for the same reason, or
	// because the failure was not an outage (see WithFailOpen).
	FailedClosed uint64
	// BadKey requests were refused with 400 because the key function failed
	// or the backend cannot hold the key (core.ErrInvalidKey).
	BadKey uint64
	// Canceled requests ended (client gone) before the bucket answered.
	Canceled uint64
	// Panicked requests met a panic in the limiter: the key function, the
	// Buckets (store, executor, plan) or the middleware itself. The panic is
	// reported to the WithErrorHook function as a *cas.PanicError (value and
	// stack) and re-raised on the request's goroutine, as
	// http.TimeoutHandler re-raises its handler's: the request is never
	// served, the connection is dropped by net/http (or the panic reaches a
	// recovery middleware placed outside this one), and the process lives
	// on even when the panic happened on the goroutine that waits for a
	// distributed bucket. A panic is a bug, not an outage: failing open on
	// it would let a client that can trigger it choose to be unlimited.
	Panicked uint64
}

// Middleware limits requests per client. Create it with New and wrap
// handlers with its Handler method, a func(http.Handler) http.Handler. It is
// safe for concurrent use.
type Middleware struct {
	src    Buckets
	local  bool
	o      options
	only   *http.ServeMux
	except *http.ServeMux
	policy policyCache

	allowed, limited, skipped, failedOpen, failedClosed, badKey, canceled, panicked atomic.Uint64
	degradedAllowed, degradedLimited                                                atomic.Uint64
}

// New returns middleware taking tokens from b: one bucket per client key. It
// takes the options WithKey, WithCost, WithSkip, WithExcept, WithOnly,
// WithHeaders, WithTimeout, WithFailOpen, WithErrorHook and WithProblemType.
func New(b Buckets, opts ...Option) *Middleware {
	m := &Middleware{src: b, o: collect(opts, applyOption)}
	_, m.local = b.(*Local)
	m.only = patternMux(m.o.only)
	m.except = patternMux(m.o.except)
	return m
}

func patternMux(patterns []string) *http.ServeMux {
	if len(patterns) == 0 {
		return nil
	}
	mux := http.NewServeMux()
	for _, p := range patterns {
		mux.Handle(p, http.NotFoundHandler())
	}
	return mux
}

func matches(mux *http.ServeMux, r *http.Request) bool {
	_, pattern := mux.Handler(r)
	return pattern != ""
}

// Handler returns next limited per client.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

// Stats returns the counters so far.
func (m *Middleware) Stats() Stats {
	return Stats{
		Allowed: m.allowed.Load(), Limited: m.limited.Load(), Skipped: m.skipped.Load(),
		FailedOpen: m.failedOpen.Load(), FailedClosed: m.failedClosed.Load(),
		BadKey: m.badKey.Load(), Canceled: m.canceled.Load(), Panicked: m.panicked.Load(),
		DegradedAllowed: m.degradedAllowed.Load(), DegradedLimited: m.degradedLimited.Load(),
	}
}

func (m *Middleware) skip(r *http.Request) bool {
	if m.only != nil && !matches(m.only, r) {
		return true
	}
	if m.except != nil && matches(m.except, r) {
		return true
	}
	for _, f := range m.o.skip {
		if f(r) {
			return true
		}
	}
	return false
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.skip(r) {
		m.skipped.Add(1)
		next.ServeHTTP(w, r)
		return
	}
	if m.limit(w, r) {
		next.ServeHTTP(w, r)
	}
}

// limit decides r: it answers every refusal itself and reports whether next
// serves r. A panic anywhere in here is counted, reported and re-raised on
// this goroutine (see Stats.Panicked); next's own panics are not ours.
func (m *Middleware) limit(w http.ResponseWriter, r *http.Request) (serve bool) {
	defer func() {
		if v := recover(); v != nil {
			m.panicked.Add(1)
			p := newPanicError(v)
			if m.o.onError != nil {
				m.o.onError(r, p)
			}
			if v == http.ErrAbortHandler { // net/http's silent abort stays silent
				panic(v)
			}
			panic(p)
		}
	}()
	key, err := m.o.key(r)
	if err != nil {
		m.refuseKey(w, r, err)
		return false
	}
	cost := int64(1)
	if m.o.cost != nil {
		cost = max(m.o.cost(r), 1)
	}
	u, err := m.take(r, key, cost)
	if err != nil {
		return m.failed(w, r, err)
	}
	h := w.Header()
	if m.o.headers != 0 && len(u.Config.Bandwidths) > 0 {
		pv := ""
		if m.o.headers&policy.IETFHeaders != 0 {
			pv = m.policy.get(u.Config.Bandwidths)
		}
		writeHeaders(h, &u, cost, m.o.headers, pv)
	}
	switch {
	case u.Probe.Consumed && u.Degraded:
		m.degradedAllowed.Add(1)
		return true
	case u.Probe.Consumed:
		m.allowed.Add(1)
		return true
	case u.Degraded:
		m.degradedLimited.Add(1)
	default:
		m.limited.Add(1)
	}
	p := Problem{Type: m.o.problem, Title: http.StatusText(http.StatusTooManyRequests),
		Status: http.StatusTooManyRequests, Policies: fired(&u, cost)}
	if secs, ok := header.RetryAfter(u.Probe.WaitForRefill); ok {
		h[hRetryAfter] = []string{strconv.FormatInt(secs, 10)}
		p.RetryAfter = secs
		p.Detail = fmt.Sprintf("rate limit exceeded; retry in %d s", secs)
		if len(p.Policies) > 0 {
			p.Detail = fmt.Sprintf("rate limit %s exceeded; retry in %d s", quoteList(p.Policies), secs)
		}
	} else {
		p.Detail = fmt.Sprintf("a request costing %d tokens exceeds the capacity of a limit and can never succeed", cost)
	}
	h[hCache] = []string{"no-store"}
	writeProblem(w, &p)
	return false
}

// quoteList renders names as "a", "b".
func quoteList(names []string) string {
	var b []byte
	for i, n := range names {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendQuote(b, n)
	}
	return string(b)
}
