package wire

import "github.com/bucketgrid/bucketgrid/core"

// Process applies req to the bucket stored as stored (empty: absent) at now,
// in nanoseconds of the executing side's clock, and returns the bytes to
// store, whether they changed, and the response.
//
// It is the entry-processor function: a CAS executor runs it between a read
// and a conditional write, a grid owner runs it under a per-key lock, the
// proxy-wasm filter runs it on shared data. It is pure and deterministic.
// When changed is false nothing needs writing (read-only operations, rejected
// consumptions, errors) and newStored is stored itself. An invalid request or
// corrupt stored bytes yield an error status and change nothing, except in
// ModeReconstruct, which replaces corrupt bytes with a new bucket.
func Process(stored []byte, req Request, now int64) (newStored []byte, changed bool, resp Response) {
	if err := req.Validate(); err != nil {
		return stored, false, Response{Status: StatusInvalidRequest, Message: err.Error()}
	}
	var b core.State
	exists := len(stored) > 0
	if exists {
		var err error
		if b, err = DecodeState(stored); err != nil {
			if req.Mode != ModeReconstruct || newerBucket(stored) {
				return stored, false, Response{Status: StatusCorruptState, Message: err.Error()}
			}
			exists = false // replaced by a new bucket below
		}
	}
	switch req.Mode {
	case ModeBare, ModeCheckVersion:
		if !exists {
			return stored, false, Response{Status: StatusNotFound}
		}
		if req.Mode == ModeCheckVersion && b.ConfigVersion < req.ConfigVersion {
			return stored, false, Response{Status: StatusConfigNeedsReplacing}
		}
	case ModeCreateIfAbsent, ModeCreateOrReplace, ModeReconstruct:
		if !exists {
			b = core.NewState(req.Config.Clone(), now)
			b.ConfigVersion = req.ConfigVersion
			changed = true
		} else if req.Mode != ModeCreateIfAbsent && b.ConfigVersion < req.ConfigVersion {
			b.ReplaceConfiguration(req.Config.Clone(), req.Inheritance, now)
			b.ConfigVersion = req.ConfigVersion
			changed = true
		}
	}
	resp.Results = make([]Result, len(req.Ops))
	for i := range req.Ops {
		var mutated bool
		resp.Results[i], mutated = Apply(&b, &req.Ops[i], now)
		changed = changed || mutated
		if req.Ops[i].Kind == OpGetConfiguration {
			req.Verbose = true
		}
	}
	if req.Verbose {
		d := b.Diagnose(now)
		resp.Diagnostics = &d
	}
	if !changed {
		return stored, false, resp
	}
	resp.TTL = req.Expiry.ttl(&b, now)
	return AppendState(make([]byte, 0, bucketSizeHint(&b)), &b), true, resp
}

// Apply runs one operation at now, as Process does for each operation of a
// request, and reports whether it changed the bucket beyond a refill (a
// refill alone need not be written: refilling is path-independent). op must
// be valid (see Request.Validate); OpGetConfiguration only refills. The local
// bucket of the root package runs every operation but its hot path through
// Apply, so local and distributed buckets cannot drift apart.
func Apply(b *core.State, op *Op, now int64) (Result, bool) {
	switch op.Kind {
	case OpTryConsume:
		ok := b.TryConsume(op.Tokens, now)
		return Result{OK: ok}, ok
	case OpTryConsumeAndReturnRemaining:
		p := b.TryConsumeAndReturnRemaining(op.Tokens, now)
		return Result{OK: p.Consumed, Tokens: p.Remaining, Wait: int64(p.WaitForRefill), Reset: int64(p.WaitForReset)}, p.Consumed
	case OpEstimate:
		e := b.EstimateAbilityToConsume(op.Tokens, now)
		return Result{OK: e.CanBeConsumed, Tokens: e.Remaining, Wait: int64(e.WaitForRefill)}, false
	case OpTryConsumeAsMuchAsPossible:
		n := b.TryConsumeAsMuchAsPossible(op.Tokens, now)
		return Result{OK: n > 0, Tokens: n}, n > 0
	case OpAddTokens:
		b.AddTokens(op.Tokens, now)
		return Result{OK: true}, true
	case OpForceAddTokens:
		b.ForceAddTokens(op.Tokens, now)
		return Result{OK: true}, true
	case OpConsumeIgnoringRateLimits:
		w := b.ConsumeIgnoringRateLimits(op.Tokens, now)
		ok := w != maxWait
		return Result{OK: ok, Wait: w}, ok
	case OpReserve:
		w := b.Reserve(op.Tokens, op.MaxWait, now)
		if w == maxWait {
			return Result{Tokens: minCapacity(&b.Config), Wait: w}, false
		}
		return Result{OK: true, Wait: w}, true
	case OpReset:
		b.Reset(now)
		return Result{OK: true}, true
	case OpAvailableTokens:
		return Result{OK: true, Tokens: b.AvailableTokens(now)}, false
	case OpReplaceConfiguration:
		if op.Inheritance != core.InheritReset && b.Config.Equal(op.Config) && replacesItself(b) {
			// the same configuration, nothing forced to cap: every strategy
			// but reset leaves the refilled state as it is, so nothing to
			// write (a front door that sends its limit with every batch pays
			// no write for it)
			b.Refill(now)
			return Result{OK: true}, false
		}
		b.ReplaceConfiguration(op.Config.Clone(), op.Inheritance, now)
		return Result{OK: true}, true
	case OpGetConfiguration:
		b.Refill(now)
		return Result{OK: true}, false
	}
	return Result{}, false
}

const maxWait = 1<<63 - 1

// newerBucket reports whether p looks like a bucket record of a format newer
// than this build's: a later format version followed by the bucket tag.
// ModeReconstruct leaves such records alone; any other bytes that do not
// decode are corrupt.
func newerBucket(p []byte) bool {
	return len(p) >= 2 && p[0] > FormatVersion && p[1] == tagBucket
}
