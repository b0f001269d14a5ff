package bucketgrid

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// Handle is a distributed bucket: a key, a configuration function and the
// Manager's executor. It implements Bucket; every operation is one request
// to the executor (two when the bucket must first be created, unless the
// Manager has WithEagerConfig). It is safe for concurrent use and cheap to
// create.
type Handle struct {
	m        *Manager
	key      string
	storeKey string // key as the executor stores it (WithFitKeys)
	configFn configFunc
	version  int64
	inherit  core.TokensInheritance
	listener Listener
	clock    clock.Clock // blocking calls wait on it
	seen     atomic.Bool // the bucket existed at some point (for WithRecoveryFail)
}

var _ Bucket = (*Handle)(nil)

// Execute sends ops as one atomic batch and returns their results, one per
// operation in order: the escape hatch for combinations the Bucket methods
// do not cover. It reports no Listener events. share says how the batch was
// decided, as Verbose.Share does: 0 by the executor, n ≥ 1 from this
// instance's local share of the limit cut for n instances (see Degrade).
func (h *Handle) Execute(ctx context.Context, ops ...wire.Op) (results []wire.Result, share int, err error) {
	resp, share, err := h.do(ctx, ops, false)
	return resp.Results, share, err
}

// do runs the request protocol: bare (or version-checked) first; on "not
// found" or "needs replacing" fetch the configuration and resend with it;
// on a corrupt record, by default, resend in
// wire.ModeReconstruct with it. Under WithEagerConfig the first request
// carries the configuration already (create if absent, or replace when
// versioned), unless WithRecoveryFail must notice a vanished bucket.
// The share it returns is Execute's.
func (h *Handle) do(ctx context.Context, ops []wire.Op, verbose bool) (wire.Response, int, error) {
	for i := range ops {
		if err := validOp(&ops[i]); err != nil {
			return wire.Response{}, 0, err
		}
	}
	if h.m.degrade != nil {
		return h.m.degrade.do(ctx, h, ops, verbose)
	}
	resp, err := h.remote(ctx, ops, verbose, nil)
	return resp, 0, err
}

// remote runs the request protocol of do against the executor; when
// fromExec is not nil, it reports whether an error came from the executor
// (rather than from the configuration function or a status).
func (h *Handle) remote(ctx context.Context, ops []wire.Op, verbose bool, fromExec *bool) (wire.Response, error) {
	req := wire.Request{Ops: ops, Expiry: h.m.expiry, Verbose: verbose,
		ConfigVersion: h.version, Inheritance: h.inherit}
	switch {
	case h.m.eager && !(h.m.failLost && h.seen.Load()):
		cfg, err := h.config(ctx)
		if err != nil {
			return wire.Response{}, err
		}
		req.Config = &cfg
		req.Mode = wire.ModeCreateIfAbsent
		if h.version > 0 {
			req.Mode = wire.ModeCreateOrReplace
		}
	case h.version > 0:
		req.Mode = wire.ModeCheckVersion
	}
	resp, err := h.m.exec.Execute(ctx, h.storeKey, req)
	if err != nil {
		setTrue(fromExec)
		return wire.Response{}, err
	}
	corrupt, why := false, ""
	switch resp.Status {
	case wire.StatusOK:
		h.seen.Store(true)
		return resp, nil
	case wire.StatusNotFound:
		if h.m.failLost && h.seen.Load() {
			return wire.Response{}, fmt.Errorf("%w: %s", ErrBucketNotFound, core.RedactKey(h.key))
		}
		req.Mode = wire.ModeCreateIfAbsent
	case wire.StatusConfigNeedsReplacing:
	case wire.StatusCorruptState:
		if h.m.failLost {
			return wire.Response{}, resp.Err()
		}
		corrupt, why = true, resp.Message
	default:
		return wire.Response{}, resp.Err()
	}
	switch {
	case corrupt:
		req.Mode = wire.ModeReconstruct
	case h.version > 0:
		req.Mode = wire.ModeCreateOrReplace
	}
	if req.Config == nil {
		cfg, err := h.config(ctx)
		if err != nil {
			return wire.Response{}, err
		}
		req.Config = &cfg
	}
	if resp, err = h.m.exec.Execute(ctx, h.storeKey, req); err != nil {
		setTrue(fromExec)
		return wire.Response{}, err
	}
	if resp.Status != wire.StatusOK {
		if e := resp.Err(); e != nil {
			return wire.Response{}, e
		}
		return wire.Response{}, fmt.Errorf("bucketgrid: executor answered %v to a request carrying the configuration", resp.Status)
	}
	if corrupt {
		h.m.corrupt.replacedRecord(h.key, why)
	}
	h.seen.Store(true)
	return resp, nil
}

// setTrue sets *p when p is not nil.
func setTrue(p *bool) {
	if p != nil {
		*p = true
	}
}

// config runs the configuration function and validates its result.
func (h *Handle) config(ctx context.Context) (core.Config, error) {
	cfg, err := h.configFn(ctx)
	if err != nil {
		return core.Config{}, fmt.Errorf("bucketgrid: configuration of %s: %w", core.RedactKey(h.key), err)
	}
	if err := cfg.Validate(); err != nil {
		return core.Config{}, err
	}
	return cfg, nil
}

// validOp checks arguments before any I/O, so the error is the caller's, not
// the store's.
func validOp(op *wire.Op) error {
	r := wire.Request{Ops: []wire.Op{*op}}
	return r.Validate()
}

// run sends op as a request of its own; the runner of the shared
// behaviour.
func (h *Handle) run(ctx context.Context, op wire.Op, verbose bool) (wire.Result, Verbose, error) {
	resp, share, err := h.do(ctx, []wire.Op{op}, verbose)
	if err != nil {
		return wire.Result{}, Verbose{}, err
	}
	if !verbose {
		return resp.Results[0], Verbose{Share: share}, nil
	}
	if resp.Diagnostics == nil {
		return wire.Result{}, Verbose{}, errors.New("bucketgrid: executor answered a verbose request without diagnostics")
	}
	return resp.Results[0], Verbose{Diagnostics: *resp.Diagnostics, Share: share}, nil
}

func (h *Handle) events() Listener     { return h.listener }
func (h *Handle) sleeper() clock.Clock { return h.clock }

// validConfig validates cfg for the executing side, whose clock is a wall
// clock.
func (h *Handle) validConfig(cfg *core.Config) error { return cfg.ValidateForClock(true) }

// TryConsume implements Bucket.TryConsume in one request.
func (h *Handle) TryConsume(ctx context.Context, n int64) (bool, error) { return tryConsume(ctx, h, n) }

// TryConsumeAndReturnRemaining implements Bucket.TryConsumeAndReturnRemaining
// in one request.
func (h *Handle) TryConsumeAndReturnRemaining(ctx context.Context, n int64) (core.Probe, error) {
	return tryConsumeAndReturnRemaining(ctx, h, n)
}

// TryConsumeAndReturnRemainingVerbose implements
// Bucket.TryConsumeAndReturnRemainingVerbose in one request.
func (h *Handle) TryConsumeAndReturnRemainingVerbose(ctx context.Context, n int64) (Verbose, error) {
	return tryConsumeVerbose(ctx, h, n)
}

// EstimateAbilityToConsume implements Bucket.EstimateAbilityToConsume.
func (h *Handle) EstimateAbilityToConsume(ctx context.Context, n int64) (core.Estimate, error) {
	return estimate(ctx, h, n)
}

// TryConsumeAsMuchAsPossible implements Bucket.TryConsumeAsMuchAsPossible.
func (h *Handle) TryConsumeAsMuchAsPossible(ctx context.Context, limit int64) (int64, error) {
	return tryConsumeAsMuchAsPossible(ctx, h, limit)
}

// AddTokens implements Bucket.AddTokens.
func (h *Handle) AddTokens(ctx context.Context, n int64) error {
	return addTokens(ctx, h, wire.OpAddTokens, n)
}

// ForceAddTokens implements Bucket.ForceAddTokens.
func (h *Handle) ForceAddTokens(ctx context.Context, n int64) error {
	return addTokens(ctx, h, wire.OpForceAddTokens, n)
}

// ConsumeIgnoringRateLimits implements Bucket.ConsumeIgnoringRateLimits.
func (h *Handle) ConsumeIgnoringRateLimits(ctx context.Context, n int64) (time.Duration, error) {
	return consumeIgnoringRateLimits(ctx, h, n)
}

// Reset implements Bucket.Reset.
func (h *Handle) Reset(ctx context.Context) error { return reset(ctx, h) }

// AvailableTokens implements Bucket.AvailableTokens.
func (h *Handle) AvailableTokens(ctx context.Context) (int64, error) { return availableTokens(ctx, h) }

// ReplaceConfiguration implements Bucket.ReplaceConfiguration explicitly; the
// stored configuration version is left as it is.
func (h *Handle) ReplaceConfiguration(ctx context.Context, cfg core.Config, strategy core.TokensInheritance) error {
	return replaceConfiguration(ctx, h, cfg, strategy)
}

// Diagnose implements Bucket.Diagnose with the stored bucket.
func (h *Handle) Diagnose(ctx context.Context) (core.Diagnostics, error) { return diagnose(ctx, h) }

// Consume implements Bucket.Consume: one request reserves the tokens, then
// it sleeps on the Manager's clock.
func (h *Handle) Consume(ctx context.Context, n int64) error {
	return consume(ctx, h, n)
}
