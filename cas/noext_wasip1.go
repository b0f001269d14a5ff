//go:build wasip1

package cas

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
)

// The Envoy filter's store, on proxy-wasm shared data, reports no written
// versions and cannot batch (it implements neither Writer nor Batcher), so
// the .wasm leaves the memory and the pipeline out, to stay within its size
// budget: under wasip1 an Executor never remembers buckets nor pipelines,
// whatever its store and options, and behaves otherwise as anywhere else.

type memory struct{}

func newMemory(MemoryConfig) *memory { return nil }

func (*memory) get(string, int64) ([]byte, Version, bool)         { return nil, 0, false }
func (*memory) put(string, []byte, Version, int64, time.Duration) {}
func (*memory) won(string)                                        {}
func (*memory) lost(string)                                       {}
func (*memory) forget(string)                                     {}

type pipe struct{}

func newPipe(Batcher, func(context.Context, *Op) error, PipelineConfig, *atomic.Int64, *atomic.Int64, *atomic.Int64) *pipe {
	return nil
}

func (*pipe) do(context.Context, *Op) error { panic("cas: no pipeline under wasip1") }

// A proxy-wasm VM runs one callback at a time and no goroutine between
// callbacks, so no two requests ever wait for one key together: under
// wasip1 an Executor runs every request in a round of its own, leaving the
// coalescing machinery (and the context functions it needs) out.
const coalescing = false

// sleep waits a retry's delay with time.Sleep rather than a timer, whose
// channel of time.Time would link time's formatting (60 KB) into the
// .wasm; nothing can cancel ctx while a VM's only thread sleeps, so it is
// checked before and after. A Sleeper clock waits as everywhere else.
func sleep(ctx context.Context, c clock.Clock, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s, ok := c.(clock.Sleeper); ok {
		return s.Sleep(ctx, d)
	}
	if d > 0 {
		time.Sleep(d)
	}
	return ctx.Err()
}
