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
// 3 MB with 100 KB of margin (a test holds the size and the package list): the
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
// The configuration is envoyproxy/ratelimit's rule format: the rules (the
// documents cmd/bucketgrid loads, its YAML files in their JSON form), the
// domain they are for, and the route's rate_limits, whose actions build the
// descriptors as Envoy's rate-limit filter builds them (request_headers,
// remote_address, generic_key, header_value_match with exact, prefix,
// suffix, contains and present matchers, and path_separated_prefix; package
// policy):
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
// Each request is decided exactly as the rate-limit service decides the
// same descriptors, by the same package (policy): every descriptor
// counted, a fixed window counting refused hits, a 429 when any descriptor
// is over its limit, with Retry-After, x-envoy-ratelimited: true, the
// configured body and the headers selected (ietf: RateLimit-Policy and
// RateLimit; x_ratelimit; draft: ratelimit-limit/-remaining/-reset). One
// rule file thus configures the global service and the local filter. Each
// descriptor's bucket runs through a cas.Executor with bounded immediate
// retries over a Store; all buckets of a plugin live in one slot table
// (slots) named "rules". A key longer than MaxKeyLen bytes is replaced by
// its digest, in a namespace no literal key reaches.
//
// # Paths
//
// Unlike Envoy's own rate-limit actions, which match :path as it comes, the
// filter's matchers (and request_headers on :path) see it normalised, so
// that a client's spelling cannot choose its limit; raw_path: true turns
// this off and matches as a bare Envoy matcher does. The normal form is the
// path an upstream serves when it reads it as RFC 3986 does and also cuts
// ";" parameters off each segment as Tomcat, Jetty and Spring do:
//
//   - the query is cut off ("/api/x?bust=1" → "/api/x");
//   - ";" parameters are cut off every segment ("/api;a=b/x", "/api;/x" and
//     "/;/api/x" → "/api/x"); an escaped "%3B" stays data;
//   - escapes of unreserved characters are decoded ("/%61pi/x" → "/api/x"),
//     the hex digits of the others upper-cased;
//   - "." and ".." segments are removed (RFC 3986 §5.2.4, as Envoy's
//     normalize_path does), then runs of "/" merged (as merge_slashes does);
//     a path ending in "/" or a dot segment keeps a final "/".
//
// The path Envoy forwards is not changed. A request whose path upstreams
// read differently is refused with 400 (details bucketgrid_ambiguous_path,
// counted as invalid_path), since no single reading could be counted: an
// escaped slash or backslash (%2F, %5C; Envoy's
// path_with_escaped_slashes_action REJECT_REQUEST), a "\", a dot segment
// spelled with an escape or a parameter ("%2E%2E", "..;"), a ".." after an
// empty segment that follows a named one ("/a//../b" is /a/b to Envoy, /b
// to nginx), a malformed escape, "#", a control character or a space, and
// a path not starting with "/" other than "*". Paths are not case-folded:
// use a string_match with ignore_case for case-insensitive upstreams.
//
// FuzzPathSpellings holds the promise: for any request path, no upstream
// reading it in any combination of these ways (parameters kept or cut,
// escaped separators decoded or not, "\" a separator or not, escapes
// decoded before or after dot segments, slashes merged never, before or
// after) serves a resource under a limited path when the filter lets the
// request through uncounted.
//
// A :path exact_match, prefix_match or path_separated_prefix whose value
// no normalised path can match ("/api;v=1/", "/%61pi") is refused at
// configure time with the form that would. path_separated_prefix is the
// filter's addition to Envoy's header matchers (Envoy has it as a route
// match only): "/api" matches "/api", "/api/…" and "/api?…", never "/apix",
// which prefix_match "/api" counts.
//
// The filter's former configuration format (policies, path) is refused
// with an error that says what replaces each of its members. What it had
// and the rule format has not: a cost per request (every request is one
// hit), several bandwidths in one bucket (each limit is a descriptor of its
// own, told apart by a generic_key), the refund of earlier policies when a
// later one refused (every descriptor counts, as in the service), case
// folding of paths (a string_match with ignore_case replaces it), and the
// refusal of policy names whose metrics would collide (there is one metric
// set now).
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
// Under a token_bucket rule an eviction never takes a spent bucket (one
// without a token) while a probed bucket with tokens left exists, so a
// refused client stays refused until its bucket refills unless every
// bucket a newcomer's probes reach is spent. A fixed window's bucket holds
// 2^32 tokens whatever its limit, so the store cannot tell a spent window:
// it evicts the probed window with the fewest hits, which of one rule is
// never a spent one, but while the table is known to be full a newcomer
// examines two probes only, and of two spent windows evicts one. An
// evicted client starts again from a full bucket, gaining at most what its
// bucket lacked (for a fixed window, one window's limit).
// A key the store cannot hold would be answered 400 — never the failure
// mode — but every key is digested into one it holds. Each of these cases
// is counted and logged (at most once a second), and no log line ever
// contains a key or any part of one.
//
// # Metrics
//
// The filter's counters are defined with proxy_define_metric and named
// "<stat_prefix>.policy.rules.<event>" (stat_prefix defaults to
// "bucketgrid"): ok, over_limit, error, failure_mode_allowed, table_full,
// table_full_allowed, evicted, cas_conflict, cas_gave_up, invalid_key and
// invalid_path.
// Envoy files them under "wasmcustom." and shows them without it; every
// worker adds to the same counters. examples/envoy/envoy.yaml turns
// "rules" into a tag.
//
// # State
//
// Each worker thread of Envoy runs its own VM; they share the buckets through
// shared data, which lives for the Envoy process, has no TTL and no delete.
// Each plugin therefore has a fixed table of slots (slots, default 4096) with
// a directory per 8 slots; see Store for the design and its one
// unconditional write. A bucket's slot frees when the bucket has refilled
// completely (then it equals a new one). A table takes 92 % to 100 % of its
// slots before the first new client finds none free (measured: 97 % for
// 4096 slots), so size slots at the number of descriptors whose buckets
// are not full at the same time, divided by 0.9. Times are WASI wall-clock
// nanoseconds, shared by all workers.
package wasmfilter
