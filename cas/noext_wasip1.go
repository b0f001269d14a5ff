//go:build wasip1

package cas

import (
	"context"
	"sync/atomic"
	"time"
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
