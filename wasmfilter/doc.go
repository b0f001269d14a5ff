// Package wasmfilter is the bucketgrid rate limiter as an Envoy HTTP filter
// on proxy-wasm ABI 0.2.1: the same core.Process and cas.Executor as every
// other backend, with its state in proxy-wasm shared data.
//
// # Building and loading
//
// scripts/build-wasm.sh builds filter.wasm with the standard Go toolchain
// (GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared, a WASI reactor); package
// proxywasm is the guest binding and cmd/filter the binary. Envoy 1.33 or
// later loads it with envoy.filters.http.wasm; examples/envoy has an
// envoy.yaml. The module imports only what Envoy provides (a test asserts the
// list).
//
// # Layers
//
// Host abstracts the host calls the filter makes; VM dispatches the ABI
// callbacks (context create, vm start, configure, request and response
// headers, done, delete) to a Plugin per plugin context. The binding is a
// thin forwarder, so everything above it runs natively in tests against a
// fake host that copies Envoy's shared-data rules, and the same sequence is
// driven through the real .wasm under wazero.
//
// # Checking a request
//
// For each policy whose path prefix matches (in order), the filter builds the
// key from the configured parts, and runs one TryConsumeAndReturnRemaining
// of the policy's cost through a cas.Executor with bounded immediate retries
// over a Store. The first rejection answers 429 locally with Retry-After (the
// core's wait rounded up to whole seconds, at least 1: never earlier than
// the request could succeed), x-envoy-ratelimited: true and the configured
// body; policies after it are not charged and those before it get their
// tokens back, so a rejected request costs nothing. An admitted request
// continues, and its response gets the configured headers:
//
//	RateLimit-Policy: "per-client";q=100;w=60
//	RateLimit: "per-client";r=42;t=35
//	x-ratelimit-limit: 100
//	x-ratelimit-remaining: 42
//	x-ratelimit-reset: 35
//
// q is the capacity of the policy's smallest bandwidth (the bound on r) and w
// its refill period in seconds; r is the tokens left; t is the seconds until
// the bucket is full again (admitted) or until the request could succeed
// (rejected). The x-ratelimit headers describe the binding policy, the one
// with the fewest tokens left.
//
// A store failure (an error status from the host, a full slot table) lets
// the request through with failure_mode "open" (the default) and rejects it
// with "closed"; both are logged. Losing the compare-and-swap race
// max_attempts times is always a rejection: contention means traffic on that
// key, and must not open the gate. A proxy-wasm VM cannot sleep (nothing else
// in the VM runs meanwhile), so retries are immediate; the contenders are
// only the other worker threads.
//
// # State
//
// Each worker thread of Envoy runs its own VM; they share the buckets through
// shared data, which lives for the Envoy process, has no TTL and no delete.
// Store therefore hashes keys into a fixed table of slots per policy (slots,
// default 4096), stores the key and an expiry with each bucket, and reuses
// a slot once its bucket has refilled completely (then it equals a new one).
// All writes are compare-and-swaps except the very first write of a slot,
// which Envoy only offers unconditionally; the filter makes those writes
// when a plugin is configured, before it serves traffic (Store.Prepare). See
// Store for the race that remains and its bound. Times are WASI wall-clock
// nanoseconds, shared by all workers.
package wasmfilter
