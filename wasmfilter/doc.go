// Package wasmfilter is the bucketgrid rate limiter as an Envoy HTTP filter
// on proxy-wasm ABI 0.2.1: the same wire.Process and cas.Executor as every
// other backend, with its state in proxy-wasm shared data.
//
// # Building and loading
//
// scripts/build-wasm.sh builds filter.wasm with the standard Go toolchain
// (GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared, a WASI reactor); package
// proxywasm is the guest binding and cmd/filter the binary. Envoy 1.33 or
// later loads it with envoy.filters.http.wasm; examples/envoy has an
// envoy.yaml. The module imports only what Envoy provides (a test asserts the
// list). Each worker thread compiles its own VM of it, so it is kept under
// 3 MB (a test holds the size and the package list): the
// plugin configuration is read by a small JSON reader of this package rather
// than encoding/json, whose reflection would make up a fifth of the module,
// and core, cas and this package use neither fmt (with reflect and os,
// 430 KB) nor crypto/sha256 (Go's FIPS module, 285 KB).
//
// # Layers
//
// Host abstracts the host calls the filter makes; VM dispatches the ABI
// callbacks (context create, vm start, configure, request and response
// headers, done, delete) to a Plugin per plugin context. The binding is a
// thin forwarder, so everything above it runs natively in tests against a
// fake host that copies Envoy's shared-data and stats rules, and the same
// sequence is driven through the real .wasm under wazero.
//
// # Checking a request
//
// The filter reads :path as Config.Path says (by default normalised: query
// cut off, path parameters cut off each segment, "//" collapsed, "." and
// ".." resolved, escapes of unreserved characters decoded), so that
// "//api/x", "/%61pi/x" or "/api;a=b/x" cannot escape a policy for "/api/". For each policy whose path prefix matches (in order),
// it builds the key from the configured parts and runs one
// TryConsumeAndReturnRemaining of the policy's cost through a cas.Executor
// with bounded immediate retries over a Store. A key longer than MaxKeyLen
// bytes or not valid UTF-8 is replaced by '#' and its SHA-256 digest; a
// literal key starts with the policy name, so no client can reach a
// digest's bucket by sending the digest.
//
// The first rejection answers 429 locally with Retry-After (the core's wait
// rounded up to whole seconds, at least 1: never earlier than the request
// could succeed), x-envoy-ratelimited: true and the configured body;
// policies after it are not charged and those before it get their tokens
// back, so a rejected request costs nothing. An admitted request continues,
// and its response gets the configured headers, one item per bandwidth of
// every policy that took part (a policy of one bandwidth is named alone, one
// of several as "policy/bandwidth-id"):
//
//	RateLimit-Policy: "per-client/burst";q=10;w=60, "per-client/hourly";q=200;w=3600
//	RateLimit: "per-client/burst";r=9;t=6, "per-client/hourly";r=199;t=3600
//	x-ratelimit-limit: 10
//	x-ratelimit-remaining: 9
//	x-ratelimit-reset: 6
//
// The numbers count requests of the policy's cost: q is the bandwidth's
// capacity divided by the cost, r the requests its tokens still allow. w is
// the seconds an empty bandwidth takes to fill up (the refill period when
// refill_tokens equals capacity), t the seconds until r is at least 1 again
// when it is 0 — for the bandwidth that refused a request, its Retry-After —
// and otherwise until the bandwidth is full. The x-ratelimit headers describe
// the binding bandwidth, the one with the fewest requests left; on a 429 the
// one of the refusing policy that Retry-After waits for, so that
// x-ratelimit-reset and Retry-After always agree. RFC 9651
// integers have at most 15 digits, so a configuration whose q would exceed
// 999,999,999,999,999 is refused when the IETF headers are on.
//
// # Rules
//
// Instead of policies, the configuration may give envoyproxy/ratelimit's
// rules (the documents cmd/bucketgrid loads: its YAML files in their JSON
// form), the domain they are for, and the route's rate_limits, whose
// actions build the descriptors as Envoy's rate-limit filter builds them
// (request_headers, remote_address, generic_key, header_value_match with
// exact, prefix, suffix, contains and present matchers; package policy):
//
//	{
//	  "domain": "edge",
//	  "rate_limits": [
//	    {"actions": [{"remote_address": {}}]},
//	    {"actions": [{"request_headers": {"header_name": "x-api-key", "descriptor_key": "api_key"}}]}
//	  ],
//	  "rules": [{"domain": "edge", "descriptors": [
//	    {"key": "remote_address", "rate_limit": {"unit": "minute", "requests_per_unit": 60}},
//	    {"key": "api_key", "rate_limit": {"unit": "hour", "requests_per_unit": 1000}}
//	  ]}],
//	  "headers": {"x_ratelimit": true}
//	}
//
// Each request is then decided exactly as the rate-limit service decides
// the same descriptors, by the same package (policy): every descriptor
// counted, a fixed window counting refused hits, a 429 when any descriptor
// is over its limit, and the service's headers (draft adds its
// ratelimit-limit/-remaining/-reset names). One rule file thus configures
// the global service and the local filter, which holds its buckets per
// Envoy in one slot table (slots). Paths are matched as Envoy's actions
// match them: normalise them in Envoy's connection manager (normalize_path,
// merge_slashes). Its counters are those of a policy named "rules".
//
// # When the filter cannot decide
//
// A shared-data failure (an error status from the host) lets the request
// through with failure_mode "open" (the default) and rejects it with
// "closed". Losing the compare-and-swap race max_attempts times is always a
// rejection: contention means traffic on that key, and must not open the
// gate. A proxy-wasm VM cannot sleep (nothing else in the VM runs
// meanwhile), so retries are immediate; the contenders are only the other
// worker threads. A new client that finds no free slot is not a failure:
// table_full decides (evict the bucket closest to full, reject, or allow).
// An eviction never takes a spent bucket (one with a bandwidth short of a
// request's tokens) while a probed bucket with tokens left exists, so a
// refused client stays refused until its bucket refills unless every
// bucket a newcomer's probes reach is spent; an evicted client starts again
// from a full bucket, gaining at most the tokens its bucket lacked.
// A key the store cannot hold would be answered 400 — never the failure
// mode — but every key is digested into one it holds. Each of these cases
// is counted and logged (at most once a second), and no log line ever
// contains a key or any part of one.
//
// # Metrics
//
// Each policy has counters, defined with proxy_define_metric and named
// "<stat_prefix>.policy.<policy>.<event>" (stat_prefix defaults to
// "bucketgrid"; a '.' in the policy name becomes '_', and a configuration
// whose policies would share a name this way, "a.b" and "a_b", is
// refused): ok, over_limit,
// error, failure_mode_allowed, table_full, table_full_allowed, evicted,
// cas_conflict, cas_gave_up and invalid_key. Envoy files them under
// "wasmcustom." and shows them without it; every worker adds to the same
// counters. examples/envoy/envoy.yaml turns the policy into a tag.
//
// # State
//
// Each worker thread of Envoy runs its own VM; they share the buckets through
// shared data, which lives for the Envoy process, has no TTL and no delete.
// Each policy therefore has a fixed table of slots (slots, default 4096) with
// a directory per 8 slots; see Store for the design and its one
// unconditional write. A bucket's slot frees when the bucket has refilled
// completely (then it equals a new one). A table takes 92 % to 100 % of its
// slots before the first new client finds none free (measured: 97 % for
// 4096 slots), so size slots at the number of clients whose buckets are not
// full at the same time, divided by 0.9. Times are WASI wall-clock
// nanoseconds, shared by all workers.
package wasmfilter
