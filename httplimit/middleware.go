package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
)

// Option configures New, NewLocal and NewManaged: one option set for the
// package. Each option says which constructor reads it; the others ignore it.
type Option func(*options)

type options struct {
	// middleware
	key      KeyFunc
	cost     func(*http.Request) int64
	skip     []func(*http.Request) bool
	only     []string
	except   []string
	headers  Headers
	timeout  time.Duration
	failOpen bool
	onError  func(*http.Request, error)
	problem  string

	// sources
	clock      clock.Clock
	maxClients int
	idle       time.Duration
	bucketOpts []bucketgrid.BucketOption
}

// DefaultTimeout is how long the middleware waits for a bucket by default
// before failing open or closed.
const DefaultTimeout = 250 * time.Millisecond

func newOptions(opts []Option) options {
	o := options{
		key:        ClientIP{}.Key,
		headers:    IETFHeaders,
		timeout:    DefaultTimeout,
		failOpen:   true,
		problem:    "about:blank",
		maxClients: bucketgrid.DefaultMaxEntries,
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithKey sets how a request is mapped to its client's bucket (New). The
// default is ClientIP{}.Key: the immediate peer's address, no proxy trusted.
func WithKey(k KeyFunc) Option { return func(o *options) { o.key = k } }

// WithCost sets how many tokens a request takes (New); the default is 1. A
// cost below 1 is taken as 1.
func WithCost(cost func(*http.Request) int64) Option { return func(o *options) { o.cost = cost } }

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

// WithHeaders selects the rate-limit header fields (New); the default is
// IETFHeaders. Zero writes none; Retry-After is written on 429 regardless.
func WithHeaders(h Headers) Option { return func(o *options) { o.headers = h } }

// WithTimeout bounds the time the middleware waits for a distributed bucket
// (New): past d the request fails open or closed, even if the backend
// ignores its context. The default is DefaultTimeout; d ≤ 0 waits as long as
// the request's own context allows. Local buckets never wait.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithFailOpen says what happens when the bucket cannot be consulted (New):
// true, the default, serves the request unlimited; false answers 503 with a
// problem+json body. Either way the failure is counted in Stats and passed
// to the WithErrorHook function.
func WithFailOpen(open bool) Option { return func(o *options) { o.failOpen = open } }

// WithErrorHook calls f with each failure to consult a bucket (New), before
// the request fails open or closed: log it, count it by cause.
func WithErrorHook(f func(r *http.Request, err error)) Option {
	return func(o *options) { o.onError = f }
}

// WithProblemType sets the "type" URI of the 429 problem body (New); the
// default is "about:blank".
func WithProblemType(uri string) Option { return func(o *options) { o.problem = uri } }

// WithClock sets the clock of NewLocal's buckets (default
// clock.Monotonic()) or, for NewManaged, the clock of the side that executes
// the bucket (default clock.Wall()), which the RateLimit waits are measured
// against. Tests pass a *clock.Fake.
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithMaxClients bounds the number of buckets NewLocal holds, evicting the
// least recently used beyond it (default bucketgrid.DefaultMaxEntries).
// Choose it above the number of concurrently active clients.
func WithMaxClients(n int) Option { return func(o *options) { o.maxClients = n } }

// WithIdleTimeout drops a NewLocal bucket unused for d; choose d longer than
// the longest refill-to-full time, and a dropped bucket equals a new one.
// The default, 0, drops buckets only to stay within WithMaxClients.
func WithIdleTimeout(d time.Duration) Option { return func(o *options) { o.idle = d } }

// WithBucketOptions passes options to every Manager.Bucket call of
// NewManaged, e.g. bucketgrid.WithConfigVersion for implicit configuration
// replacement.
func WithBucketOptions(opts ...bucketgrid.BucketOption) Option {
	return func(o *options) { o.bucketOpts = append(o.bucketOpts, opts...) }
}

// ErrTimeout is returned (wrapped, with context.DeadlineExceeded) to the
// error hook when a bucket did not answer within the WithTimeout deadline.
var ErrTimeout = errors.New("httplimit: bucket did not answer in time")

// Stats counts what the middleware did. Every request lands in exactly one
// counter.
type Stats struct {
	// Allowed requests took their tokens and were served.
	Allowed uint64
	// Limited requests were refused with 429.
	Limited uint64
	// Skipped requests were not limited (WithSkip, WithExcept, WithOnly).
	Skipped uint64
	// FailedOpen requests were served unlimited because the bucket failed
	// or timed out.
	FailedOpen uint64
	// FailedClosed requests were refused with 503 for the same reason.
	FailedClosed uint64
	// BadKey requests were refused with 400 because the key function failed.
	BadKey uint64
	// Canceled requests ended (client gone) before the bucket answered.
	Canceled uint64
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

	allowed, limited, skipped, failedOpen, failedClosed, badKey, canceled atomic.Uint64
}

// New returns middleware taking tokens from b: one bucket per client key.
func New(b Buckets, opts ...Option) *Middleware {
	m := &Middleware{src: b, o: newOptions(opts)}
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
		BadKey: m.badKey.Load(), Canceled: m.canceled.Load(),
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
	key, err := m.o.key(r)
	if err != nil {
		m.badKey.Add(1)
		writeProblem(w, &Problem{Type: "about:blank", Title: http.StatusText(http.StatusBadRequest),
			Status: http.StatusBadRequest, Detail: err.Error()})
		return
	}
	cost := int64(1)
	if m.o.cost != nil {
		cost = max(m.o.cost(r), 1)
	}
	u, err := m.take(r.Context(), key, cost)
	if err != nil {
		if r.Context().Err() != nil {
			m.canceled.Add(1)
			return // nobody is listening
		}
		if m.o.onError != nil {
			m.o.onError(r, err)
		}
		if m.o.failOpen {
			m.failedOpen.Add(1)
			next.ServeHTTP(w, r)
			return
		}
		m.failedClosed.Add(1)
		writeProblem(w, &Problem{Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable),
			Status: http.StatusServiceUnavailable, Detail: "the rate limiter is unavailable"})
		return
	}
	h := w.Header()
	if m.o.headers != 0 && len(u.Config.Bandwidths) > 0 {
		policy := ""
		if m.o.headers&IETFHeaders != 0 {
			policy = m.policy.get(u.Config.Bandwidths)
		}
		writeHeaders(h, &u, cost, m.o.headers, policy)
	}
	if u.Probe.Consumed {
		m.allowed.Add(1)
		next.ServeHTTP(w, r)
		return
	}
	m.limited.Add(1)
	p := Problem{Type: m.o.problem, Title: http.StatusText(http.StatusTooManyRequests),
		Status: http.StatusTooManyRequests, Policies: fired(&u, cost)}
	if secs, ok := RetryAfterSeconds(u.Probe); ok {
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
}

type takeResult struct {
	u   Usage
	err error
}

// take consults the bucket within the deadline. Distributed buckets are
// called on their own goroutine so that a backend ignoring its context still
// cannot hold the request past the deadline; the goroutine ends when the
// backend returns.
func (m *Middleware) take(ctx context.Context, key string, cost int64) (Usage, error) {
	if m.local || m.o.timeout <= 0 {
		return m.src.Take(ctx, key, cost)
	}
	ctx, cancel := context.WithTimeout(ctx, m.o.timeout)
	defer cancel()
	ch := make(chan takeResult, 1)
	go func() {
		u, err := m.src.Take(ctx, key, cost)
		ch <- takeResult{u, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil && errors.Is(res.err, context.DeadlineExceeded) {
			return Usage{}, fmt.Errorf("%w: %w", ErrTimeout, res.err)
		}
		return res.u, res.err
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Usage{}, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
		}
		return Usage{}, ctx.Err()
	}
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
