// Package gubernator benchmarks gubernator (github.com/gubernator-io/gubernator/v2)
// on the workload of grid/olric's BenchmarkCheck, for comparison: 3 instances
// in one process, its own gRPC client, 16 concurrent callers spread over the
// instances, one hot key and 10,000 keys, TryConsume(1)-like hits that are
// always under the limit. It is a module of its own so that gubernator's
// dependencies stay out of the library's go.mod, and outside the workspace:
//
//	cd bench/gubernator && GOWORK=off go test -run '^$' -bench . -benchtime 3s
package gubernator
