package bucketgrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// overrunExecutor answers every request late, whatever its context says:
// a grid member whose store waits on a dead replica does.
type overrunExecutor struct{ late time.Duration }

func (e overrunExecutor) Execute(ctx context.Context, _ string, _ wire.Request) (wire.Response, error) {
	time.Sleep(e.late) // the executor's own fault, not the test's synchronisation
	return wire.Response{}, ctx.Err()
}

func (overrunExecutor) Remove(context.Context, string) error { return nil }

func TestDegradeExecutorOverrunningItsContext(t *testing.T) {
	// The executor answers after the degrade timeout and after the caller's
	// own, later, deadline: the check is decided locally all the same, not
	// failed with the caller's deadline (which a middleware would fail open).
	const timeout = 20 * time.Millisecond
	m := bucketgrid.NewManager(overrunExecutor{late: 3 * timeout}, bucketgrid.WithDegrade(bucketgrid.Degrade{
		Instances: func() int { return 3 }, Timeout: timeout}.Tuned(1000, 0, 0)))
	h := m.Bucket("k", nine)
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
		ok, share, err := tryConsume(ctx, h, 1)
		cancel()
		if err != nil || !ok || share != 3 {
			t.Fatalf("check %d: %v %v, share %d; want admitted from the share of 3", i, ok, err, share)
		}
	}
}
