package bucketgrid

import (
	"context"
	"fmt"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// Verbose API: results together with the bucket's diagnostics, taken in the
// same atomic step (Bucket4j's asVerbose). Headers that describe every
// bandwidth (IETF RateLimit) need exactly this.

// TryConsumeAndReturnRemainingVerbose is TryConsumeAndReturnRemaining that
// also returns the diagnostics right after the consumption, under the same
// lock.
func (l *Local) TryConsumeAndReturnRemainingVerbose(_ context.Context, n int64) (core.Probe, core.Diagnostics, error) {
	if n <= 0 {
		return core.Probe{}, core.Diagnostics{}, tokensError(n)
	}
	now := l.now()
	l.mu.Lock()
	p := l.b.TryConsumeAndReturnRemaining(n, now)
	d := l.b.Diagnose(now)
	l.mu.Unlock()
	if l.env.listen() != nil {
		l.report(p.Consumed, n)
	}
	return p, d, nil
}

// TryConsumeAndReturnRemainingVerbose is TryConsumeAndReturnRemaining that
// also returns the stored bucket's diagnostics right after the consumption,
// from the same request: one round trip, one atomic step.
func (h *Handle) TryConsumeAndReturnRemainingVerbose(ctx context.Context, n int64) (core.Probe, core.Diagnostics, error) {
	resp, err := h.do(ctx, []core.Op{{Kind: core.OpTryConsumeAndReturnRemaining, Tokens: n}}, true)
	if err != nil {
		return core.Probe{}, core.Diagnostics{}, err
	}
	if resp.Diagnostics == nil {
		return core.Probe{}, core.Diagnostics{}, fmt.Errorf("bucketgrid: executor answered a verbose request without diagnostics")
	}
	r := resp.Results[0]
	h.consumed(r.OK, n)
	return core.Probe{Consumed: r.OK, Remaining: r.Tokens, WaitForRefill: time.Duration(r.Wait), WaitForReset: time.Duration(r.Reset)},
		*resp.Diagnostics, nil
}
