// Package service is the Rate Limit Service: Envoy's
// envoy.service.ratelimit.v3 API and envoyproxy/ratelimit's JSON endpoint
// over policy's rules and a bucketgrid.Manager. It is a thin shell: the
// rules decide which bucket, which operations and what answer; the Manager's
// executor (the embedded grid or a CAS store) runs the operations.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/metrics"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/policy"
)

// Options configure a Service. Manager is required.
type Options struct {
	// Manager holds the buckets.
	Manager *bucketgrid.Manager
	// Headers selects the response_headers_to_add: policy.IETFHeaders
	// (RateLimit-Policy, RateLimit), policy.XRateLimitHeaders and
	// policy.DraftHeaders (RateLimit-Limit, -Remaining, -Reset); zero adds
	// none.
	Headers policy.Headers
	// RetryAfter adds Retry-After to a refusal: the longest of the
	// refusing descriptors' waits. envoyproxy/ratelimit never sends it.
	RetryAfter bool
	// HeaderNames renames response headers: a lower-case name as package
	// policy writes it to the name sent instead (envoyproxy/ratelimit's
	// LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER).
	HeaderNames map[string]string
	// StopCountingWhenOverLimit counts, in a request of which a descriptor
	// would go over its limit, only the descriptors that would go over;
	// the others answer their count without being charged
	// (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, as
	// its Redis cache does it). It costs a check of every descriptor
	// first.
	StopCountingWhenOverLimit bool
	// GlobalShadowMode answers OK to every request, counting what would
	// have been refused (envoyproxy/ratelimit's SHADOW_MODE).
	GlobalShadowMode bool
	// GlobalQuotaMode treats every rule as quota_mode.
	GlobalQuotaMode bool
	// Timeout bounds a request whose context has no deadline; default 1s.
	Timeout time.Duration
	// Metrics receives the measurements; nil records nothing.
	Metrics *metrics.Metrics
	// Logger receives errors; nil discards them. Descriptor values are
	// never logged: they are the clients'.
	Logger *slog.Logger
	// Clock is the wall clock read for the end of a fixed window nothing
	// has been counted in yet (a check of 0 hits); every other wait and
	// reset comes from the side that ran the bucket's operations. Default
	// clock.Wall().
	Clock clock.Clock
}

// Service answers ShouldRateLimit. It is safe for concurrent use; its
// configuration is swapped atomically by SetConfig.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer

	opts     Options
	settings policy.Settings // what the rules' answers hold: from opts
	cfg      atomic.Pointer[policy.Rules]
}

// ErrNoConfig answers requests that arrive before the first SetConfig
// (gRPC Unavailable).
var ErrNoConfig = errors.New("no rate limit configuration loaded")

// New returns a service without a configuration: it refuses requests until
// SetConfig.
func New(opts Options) *Service {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Wall()
	}
	set := policy.Settings{Headers: opts.Headers, ShadowMode: opts.GlobalShadowMode, QuotaMode: opts.GlobalQuotaMode}
	if opts.RetryAfter {
		set.Headers |= policy.RetryAfterHeader
	}
	return &Service{opts: opts, settings: set}
}

// SetConfig makes cfg the configuration of every request that starts from
// now on.
func (s *Service) SetConfig(cfg *policy.Rules) { s.cfg.Store(cfg) }

// Config returns the current configuration, nil before the first SetConfig.
func (s *Service) Config() *policy.Rules { return s.cfg.Load() }

// ShouldRateLimit implements the RLS v3 API. A request a client's values
// make unusable (a descriptor over MaxDescriptorBytes, a key the backend
// cannot hold) is answered OVER_LIMIT for every descriptor: an error would
// leave it to Envoy's failure_mode_deny, which lets requests through by
// default, so a client could choose to be unlimited. Other request errors
// (an empty domain, no descriptors, too many of them: the route
// configuration's doing) are InvalidArgument; a missing configuration and
// backend failures are Unavailable, so Envoy applies its failure_mode_deny.
// A grid member without a quorum (bucketgrid.ErrNoQuorum) and a key too
// contended to update (cas.ErrConflict: the retries lost every race) answer
// OVER_LIMIT too: neither is an outage, and failing open there would admit
// everyone on the minority side of a split, or every request of a client
// that hammers its own key from enough places at once.
func (s *Service) ShouldRateLimit(ctx context.Context, in *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp, err := s.answer(ctx, in, "grpc")
	if err != nil {
		if refused(err) {
			return refusal(in), nil
		}
		return nil, grpcError(err)
	}
	return resp, nil
}

// refused reports whether err is answered OVER_LIMIT rather than an error
// (see ShouldRateLimit).
func refused(err error) bool {
	return clientRefused(err) || errors.Is(err, bucketgrid.ErrNoQuorum) || errors.Is(err, cas.ErrConflict)
}

// clientRefused reports whether err is a request error that a client's own
// descriptor values caused.
func clientRefused(err error) bool {
	var re *requestError
	return errors.As(err, &re) &&
		(errors.Is(err, policy.ErrDescriptorTooLarge) || errors.Is(err, core.ErrInvalidKey))
}

// refusal answers in OVER_LIMIT, every descriptor, counting nothing.
func refusal(in *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT,
		Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(in.GetDescriptors()))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OVER_LIMIT}
	}
	return resp
}

// answer checks in and records it as a request of api.
func (s *Service) answer(ctx context.Context, in *rlspb.RateLimitRequest, api string) (*rlspb.RateLimitResponse, error) {
	start := time.Now()
	resp, domain, err := s.check(ctx, in)
	kind := errorKind(err)
	s.opts.Metrics.Request(domain, api, resp.GetOverallCode().String(), kind, time.Since(start))
	if kind == "backend" || kind == "internal" {
		s.opts.Logger.Warn("rate limit request failed", "domain", domain, "api", api, "err", err)
	}
	return resp, err
}

// check answers in; domain is the metric label of its domain.
func (s *Service) check(ctx context.Context, in *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, string, error) {
	cfg := s.cfg.Load()
	if cfg == nil {
		return nil, metrics.UnknownDomain, ErrNoConfig
	}
	req := toRequest(in)
	domain := metrics.UnknownDomain
	if cfg.HasDomain(req.Domain) {
		domain = req.Domain
	}
	plan, err := cfg.Plan(&req, &s.settings)
	if err != nil {
		return nil, domain, &requestError{err}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.Timeout)
		defer cancel()
	}
	if s.opts.StopCountingWhenOverLimit {
		if probe := plan.Probe(); probe != nil {
			d, err := s.execute(ctx, probe)
			if err != nil {
				return nil, domain, err
			}
			plan.HoldBack(&d)
		}
	}
	d, err := s.execute(ctx, &plan)
	if err != nil {
		return nil, domain, err
	}
	if s.opts.Metrics != nil {
		for i := range d.Statuses {
			if st := &d.Statuses[i]; st.Rule != nil {
				key, valued := cfg.StatsKey(req.Domain, req.Descriptors[i].Entries, st.Rule)
				hits, _, _, _, _ := st.Counts()
				s.opts.Metrics.Descriptor(&metrics.Rule{Key: key, Valued: valued, Path: st.Rule.Path}, st, hits)
			}
		}
	}
	if d.Shadowed {
		s.opts.Metrics.GlobalShadow()
	}
	return s.response(&d), domain, nil
}

// execute runs plan's batches on the Manager's buckets and decides them.
// Batches of one bucket run in descriptor order, as envoyproxy/ratelimit's
// pipeline applies them; different buckets run concurrently.
func (s *Service) execute(ctx context.Context, plan *policy.Plan) (policy.Decision, error) {
	bs := plan.Batches
	if !oneBucket(bs) {
		return s.executeConcurrently(ctx, plan)
	}
	// the common request: nothing to run concurrently, and its one
	// outcome kept on the stack
	var one [1]policy.Outcome
	out := one[:0]
	if len(bs) > len(one) {
		out = make([]policy.Outcome, 0, len(bs))
	}
	var errs []error
	for i := range bs {
		o, err := s.runBatch(ctx, &bs[i])
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, o)
	}
	if err := errors.Join(errs...); err != nil {
		return policy.Decision{}, err
	}
	return plan.Decide(out, s.now())
}

// executeConcurrently is execute for batches on several buckets.
func (s *Service) executeConcurrently(ctx context.Context, plan *policy.Plan) (policy.Decision, error) {
	bs := plan.Batches
	out := make([]policy.Outcome, len(bs))
	errs := make([]error, len(bs))
	var groups [][]int // indices of the batches of one bucket, in order
	byKey := map[string]int{}
	for i := range bs {
		g, ok := byKey[bs[i].Key]
		if !ok {
			g = len(groups)
			byKey[bs[i].Key] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Go(func() {
			for _, i := range g {
				out[i], errs[i] = s.runBatch(ctx, &bs[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return policy.Decision{}, err
	}
	return plan.Decide(out, s.now())
}

// oneBucket reports whether every batch of bs runs on one bucket.
func oneBucket(bs []policy.Batch) bool {
	for i := 1; i < len(bs); i++ {
		if bs[i].Key != bs[0].Key {
			return false
		}
	}
	return true
}

// runBatch runs b on its bucket, created from its configuration when
// absent.
func (s *Service) runBatch(ctx context.Context, b *policy.Batch) (policy.Outcome, error) {
	cfg := b.Config
	h := s.opts.Manager.Bucket(b.Key, func(context.Context) (core.Config, error) { return cfg, nil })
	res, share, err := h.Execute(ctx, b.Ops...)
	if errors.Is(err, core.ErrInvalidKey) {
		// a descriptor the backend cannot hold is the caller's, never an outage
		return policy.Outcome{}, &requestError{redact(err, b)}
	}
	if err != nil {
		return policy.Outcome{}, &backendError{redact(err, b)}
	}
	// decided from this instance's share while the backend is out: the
	// status, current_limit and the headers describe the share
	return policy.Outcome{Results: res, Shares: share}, nil
}

func (s *Service) now() time.Time { return time.Unix(0, s.opts.Clock.Now()) }

// requestError is a request the caller got wrong.
type requestError struct{ err error }

func (e *requestError) Error() string { return e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

// backendError is a bucket the executor could not consult.
type backendError struct{ err error }

func (e *backendError) Error() string { return "rate limit backend: " + e.err.Error() }
func (e *backendError) Unwrap() error { return e.err }

// redact replaces b's bucket key, which holds the client's descriptor
// values, by its rule's configuration path in err's text: errors are logged.
func redact(err error, b *policy.Batch) error {
	msg := err.Error()
	safe := strings.ReplaceAll(msg, strconv.Quote(b.Key), "<key of "+b.Rule.Path+">")
	safe = strings.ReplaceAll(safe, b.Key, "<key of "+b.Rule.Path+">")
	if safe == msg {
		return err
	}
	return &redactedError{msg: safe, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// errorKind classifies err for the metrics; "" for nil.
func errorKind(err error) string {
	if err == nil {
		return ""
	}
	var re *requestError
	var be *backendError
	switch {
	case errors.As(err, &re):
		return "invalid_request"
	case errors.Is(err, ErrNoConfig):
		return "no_config"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &be):
		return "backend"
	}
	return "internal"
}

// grpcError maps a request's error to its gRPC status.
func grpcError(err error) error {
	var re *requestError
	var be *backendError
	switch {
	case errors.As(err, &re):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.As(err, &be), errors.Is(err, ErrNoConfig):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, fmt.Sprint(err))
}
