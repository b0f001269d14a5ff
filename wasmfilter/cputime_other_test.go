//go:build !unix

package wasmfilter

import "time"

// cpuTime is unavailable here; benchmarks then report no CPU metric.
func cpuTime() time.Duration { return 0 }
