package bucketgrid_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// slowChargeExecutor holds every request that carries no operation of the
// client's (the client only sends wire.OpTryConsume) until its context ends:
// a backend that answers the client's requests again while anything else
// it is sent (a charge on its own, say) times out, as a grid member taking
// over a crashed member's partitions may.
type slowChargeExecutor struct {
	bucketgrid.Executor
	down atomic.Bool
}

func (e *slowChargeExecutor) Execute(ctx context.Context, key string, req wire.Request) (wire.Response, error) {
	if e.down.Load() {
		return wire.Response{}, errStoreDown
	}
	for _, op := range req.Ops {
		if op.Kind == wire.OpTryConsume {
			return e.Executor.Execute(ctx, key, req)
		}
	}
	<-ctx.Done()
	return wire.Response{}, ctx.Err()
}

func TestDegradeChargeCannotBeOvertaken(t *testing.T) {
	// What a key consumed from its local share is charged before anything
	// else this instance asks of the real bucket, so the local tokens and
	// the real bucket's together never exceed the real limit, however slow
	// a charge would be on its own.
	c := clock.NewFake(time.Unix(1_800_000_000, 0))
	exec := &slowChargeExecutor{Executor: cas.New(memstore.New(memstore.WithClock(c)), cas.WithClock(c))}
	exec.down.Store(true)
	m := bucketgrid.NewManager(exec, bucketgrid.WithClock(c), bucketgrid.WithDegrade(bucketgrid.Degrade{
		Instances: func() int { return 3 }, Timeout: storeWait}.Tuned(1000, 0, 0)))
	h := m.Bucket("k", nine)
	local := consumeAll(t, h, true)
	if local != 3 {
		t.Fatalf("admitted %d while down, want the share's 3", local)
	}
	exec.down.Store(false) // the key's new owner answers
	real := consumeAll(t, h, false)
	if local+real > 9 {
		t.Fatalf("admitted %d locally and %d from the real bucket of 9: %d above the limit",
			local, real, local+real-9)
	}
	if real != 6 {
		t.Fatalf("admitted %d from the real bucket after 3 locally, want 6", real)
	}
	if st := m.Stats(); st.Charged != 3 {
		t.Fatalf("stats %+v, want the 3 local tokens charged", st)
	}
}
