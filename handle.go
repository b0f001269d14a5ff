package bucketgrid

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// Handle is a distributed bucket: a key, a configuration function and the
// Manager's executor. It implements Bucket; every operation is one request
// to the executor (two when the bucket must first be created). It is safe for
// concurrent use and cheap to create.
type Handle struct {
	m        *Manager
	key      string
	storeKey string // key as the executor stores it (WithFitKeys)
	configFn ConfigFunc
	version  int64
	inherit  core.TokensInheritance
	listener Listener
	seen     atomic.Bool // the bucket existed at some point (for RecoveryFail)
}

var _ Bucket = (*Handle)(nil)

// Key returns the bucket's key.
func (h *Handle) Key() string { return h.key }

// Execute sends ops as one atomic batch and returns their results: the
// escape hatch for combinations the Bucket methods do not cover.
func (h *Handle) Execute(ctx context.Context, ops ...core.Op) ([]core.Result, error) {
	resp, err := h.do(ctx, ops, false)
	return resp.Results, err
}

func (h *Handle) one(ctx context.Context, op core.Op) (core.Result, error) {
	resp, err := h.do(ctx, []core.Op{op}, false)
	if err != nil {
		return core.Result{}, err
	}
	return resp.Results[0], nil
}

// do runs the request protocol: bare (or version-checked) first; on "not
// found" or "needs replacing" fetch the configuration and resend with it;
// on a corrupt record, under RecoveryReconstruct, resend in
// core.ModeReconstruct with it.
func (h *Handle) do(ctx context.Context, ops []core.Op, verbose bool) (core.Response, error) {
	for i := range ops {
		if err := validOp(&ops[i]); err != nil {
			return core.Response{}, err
		}
	}
	req := core.Request{Ops: ops, Expiry: h.m.expiry, Verbose: verbose,
		ConfigVersion: h.version, Inheritance: h.inherit}
	if h.version > 0 {
		req.Mode = core.ModeCheckVersion
	}
	resp, err := h.m.exec.Execute(ctx, h.storeKey, req)
	if err != nil {
		return core.Response{}, err
	}
	corrupt, why := false, ""
	switch resp.Status {
	case core.StatusOK:
		h.seen.Store(true)
		return resp, nil
	case core.StatusNotFound:
		if h.m.recovery == RecoveryFail && h.seen.Load() {
			return core.Response{}, fmt.Errorf("%w: %s", ErrBucketNotFound, core.RedactKey(h.key))
		}
		req.Mode = core.ModeCreateIfAbsent
	case core.StatusConfigNeedsReplacing:
	case core.StatusCorruptState:
		if h.m.recovery == RecoveryFail {
			return core.Response{}, resp.Err()
		}
		corrupt, why = true, resp.Message
	default:
		return core.Response{}, resp.Err()
	}
	switch {
	case corrupt:
		req.Mode = core.ModeReconstruct
	case h.version > 0:
		req.Mode = core.ModeCreateOrReplace
	}
	cfg, err := h.configFn(ctx)
	if err != nil {
		return core.Response{}, fmt.Errorf("bucketgrid: configuration of %s: %w", core.RedactKey(h.key), err)
	}
	if err := cfg.Validate(); err != nil {
		return core.Response{}, err
	}
	req.Config = &cfg
	if resp, err = h.m.exec.Execute(ctx, h.storeKey, req); err != nil {
		return core.Response{}, err
	}
	if resp.Status != core.StatusOK {
		if e := resp.Err(); e != nil {
			return core.Response{}, e
		}
		return core.Response{}, fmt.Errorf("bucketgrid: executor answered %v to a request carrying the configuration", resp.Status)
	}
	if corrupt {
		h.m.corrupt.replacedRecord(h.key, why)
	}
	h.seen.Store(true)
	return resp, nil
}

// validOp checks arguments before any I/O, so the error is the caller's, not
// the store's.
func validOp(op *core.Op) error {
	r := core.Request{Ops: []core.Op{*op}}
	return r.Validate()
}

func (h *Handle) consumed(ok bool, n int64) {
	if ok {
		h.listener.OnConsumed(n)
	} else {
		h.listener.OnRejected(n)
	}
}

// TryConsume takes n tokens if they are available now.
func (h *Handle) TryConsume(ctx context.Context, n int64) (bool, error) {
	r, err := h.one(ctx, core.Op{Kind: core.OpTryConsume, Tokens: n})
	if err != nil {
		return false, err
	}
	h.consumed(r.OK, n)
	return r.OK, nil
}

// TryConsumeAndReturnRemaining takes n tokens if available and reports the
// remaining tokens and waits.
func (h *Handle) TryConsumeAndReturnRemaining(ctx context.Context, n int64) (core.Probe, error) {
	r, err := h.one(ctx, core.Op{Kind: core.OpTryConsumeAndReturnRemaining, Tokens: n})
	if err != nil {
		return core.Probe{}, err
	}
	h.consumed(r.OK, n)
	return core.Probe{Consumed: r.OK, Remaining: r.Tokens, WaitForRefill: time.Duration(r.Wait), WaitForReset: time.Duration(r.Reset)}, nil
}

// EstimateAbilityToConsume reports whether n tokens could be taken now.
func (h *Handle) EstimateAbilityToConsume(ctx context.Context, n int64) (core.Estimate, error) {
	r, err := h.one(ctx, core.Op{Kind: core.OpEstimate, Tokens: n})
	if err != nil {
		return core.Estimate{}, err
	}
	return core.Estimate{CanBeConsumed: r.OK, Remaining: r.Tokens, WaitForRefill: time.Duration(r.Wait)}, nil
}

// TryConsumeAsMuchAsPossible takes up to limit tokens.
func (h *Handle) TryConsumeAsMuchAsPossible(ctx context.Context, limit int64) (int64, error) {
	r, err := h.one(ctx, core.Op{Kind: core.OpTryConsumeAsMuchAsPossible, Tokens: limit})
	if err != nil {
		return 0, err
	}
	if r.Tokens > 0 {
		h.listener.OnConsumed(r.Tokens)
	}
	return r.Tokens, nil
}

// AddTokens adds n tokens, capped at capacity.
func (h *Handle) AddTokens(ctx context.Context, n int64) error {
	_, err := h.one(ctx, core.Op{Kind: core.OpAddTokens, Tokens: n})
	return err
}

// ForceAddTokens adds n tokens beyond capacity.
func (h *Handle) ForceAddTokens(ctx context.Context, n int64) error {
	_, err := h.one(ctx, core.Op{Kind: core.OpForceAddTokens, Tokens: n})
	return err
}

// ConsumeIgnoringRateLimits takes n tokens into overdraft if need be.
func (h *Handle) ConsumeIgnoringRateLimits(ctx context.Context, n int64) (time.Duration, error) {
	r, err := h.one(ctx, core.Op{Kind: core.OpConsumeIgnoringRateLimits, Tokens: n})
	if err != nil {
		return 0, err
	}
	if !r.OK {
		return 0, ErrOverdraftTooLarge
	}
	h.listener.OnConsumed(n)
	return time.Duration(r.Wait), nil
}

// Reset fills the bucket.
func (h *Handle) Reset(ctx context.Context) error {
	_, err := h.one(ctx, core.Op{Kind: core.OpReset})
	return err
}

// AvailableTokens returns the available tokens.
func (h *Handle) AvailableTokens(ctx context.Context) (int64, error) {
	r, err := h.one(ctx, core.Op{Kind: core.OpAvailableTokens})
	return r.Tokens, err
}

// ReplaceConfiguration replaces the stored configuration explicitly; the
// stored configuration version is left as it is.
func (h *Handle) ReplaceConfiguration(ctx context.Context, cfg core.Config, strategy core.TokensInheritance) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	_, err := h.one(ctx, core.Op{Kind: core.OpReplaceConfiguration, Config: &cfg, Inheritance: strategy})
	return err
}

// Diagnose returns the stored configuration, state and diagnostics.
func (h *Handle) Diagnose(ctx context.Context) (core.Diagnostics, error) {
	resp, err := h.do(ctx, []core.Op{{Kind: core.OpGetConfiguration}}, true)
	if err != nil {
		return core.Diagnostics{}, err
	}
	if resp.Diagnostics == nil {
		return core.Diagnostics{}, fmt.Errorf("bucketgrid: executor answered without diagnostics")
	}
	return *resp.Diagnostics, nil
}

// Consume takes n tokens, waiting as long as needed.
func (h *Handle) Consume(ctx context.Context, n int64) error {
	ok, err := h.reserveAndWait(ctx, n, math.MaxInt64)
	if err == nil && !ok {
		err = ErrExceedsCapacity
	}
	return err
}

// TryConsumeWithin takes n tokens if they arrive within maxWait, waiting for
// them.
func (h *Handle) TryConsumeWithin(ctx context.Context, n int64, maxWait time.Duration) (bool, error) {
	return h.reserveAndWait(ctx, n, int64(maxWait))
}

// reserveAndWait reserves n tokens in one request, then waits out the
// reservation. If ctx ends during the wait the tokens are given back.
func (h *Handle) reserveAndWait(ctx context.Context, n, maxWait int64) (bool, error) {
	if maxWait < 0 {
		maxWait = 0
	}
	r, err := h.one(ctx, core.Op{Kind: core.OpReserve, Tokens: n, MaxWait: maxWait})
	if err != nil {
		return false, err
	}
	if !r.OK {
		h.listener.OnRejected(n)
		return false, nil
	}
	if r.Wait > 0 {
		h.listener.OnParked(time.Duration(r.Wait))
		if err := clock.Sleep(ctx, h.m.clock, time.Duration(r.Wait)); err != nil {
			h.listener.OnInterrupted(err)
			// give the reservation back; the caller's context is over, so
			// use a short context of our own
			back, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			if _, aerr := h.one(back, core.Op{Kind: core.OpAddTokens, Tokens: n}); aerr != nil {
				return false, fmt.Errorf("%w (returning the reserved tokens failed: %v)", err, aerr)
			}
			return false, err
		}
	}
	h.listener.OnConsumed(n)
	return true, nil
}
