// Package core is the pure token-bucket model of bucketgrid: bandwidths,
// configurations, bucket state, every Bucket4j operation, configuration
// replacement, the distributed request/response set and its versioned binary
// codec.
//
// Nothing in core performs I/O, starts goroutines or reads a clock: time is
// always an argument, in nanoseconds. Local buckets pass a monotonic reading;
// distributed executors pass wall-clock Unix nanoseconds from the side that
// runs Process. All arithmetic is on integers; where a product would overflow
// 64 bits it is carried out in 128 bits, so no input yields a wrong answer and
// no float appears anywhere in a decision.
//
// Process is the single entry point every executor calls: a CAS loop, a grid
// owner and the proxy-wasm filter all run the same function on stored bytes.
package core
