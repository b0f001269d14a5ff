package bucketgrid_test

import (
	"context"
	"testing"

	"github.com/bucketgrid/bucketgrid/core/wire"
)

// TestDegradedDecisionIsInTheResult: how an operation was decided comes
// back with its answer, for the batch a rate-limit service sends and for
// the verbose check an HTTP middleware makes, and describes that very
// answer, whatever else runs concurrently.
func TestDegradedDecisionIsInTheResult(t *testing.T) {
	f := newDegradeFixture(t)
	ctx := context.Background()
	h := f.m.Bucket("k", nine)
	res, share, err := h.Execute(ctx, wire.Op{Kind: wire.OpTryConsume, Tokens: 1})
	if err != nil || !res[0].OK || share != 0 {
		t.Fatalf("Execute with the store up = %+v, share %d, %v; want consumed by the executor (share 0)", res, share, err)
	}
	v, err := h.TryConsumeAndReturnRemainingVerbose(ctx, 1)
	if err != nil || !v.Probe.Consumed || v.Share != 0 || v.Diagnostics.Available[0] != 7 {
		t.Fatalf("verbose with the store up = %+v, %v; want consumed by the executor, 7 left", v, err)
	}
	f.store.mode.Store(storeDown)
	res, share, err = h.Execute(ctx, wire.Op{Kind: wire.OpTryConsume, Tokens: 1})
	if err != nil || !res[0].OK || share != 3 {
		t.Fatalf("Execute with the store down = %+v, share %d, %v; want consumed from the share of 3 instances", res, share, err)
	}
	v, err = h.TryConsumeAndReturnRemainingVerbose(ctx, 1)
	if err != nil || !v.Probe.Consumed || v.Share != 3 || v.Diagnostics.State.Config.Bandwidths[0].Capacity != 3 {
		t.Fatalf("verbose with the store down = %+v, %v; want consumed from a share of 3 (capacity 3)", v, err)
	}
	f.store.mode.Store(storeUp)
}
