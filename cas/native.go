//go:build !wasip1

package cas

import (
	"context"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
)

// coalescing reports whether an Executor coalesces concurrent requests for
// one key (see WithoutBatching); under wasip1 it never does.
const coalescing = true

// sleep waits a retry's delay: clock.Sleep.
func sleep(ctx context.Context, c clock.Clock, d time.Duration) error { return clock.Sleep(ctx, c, d) }
