// Package policy is the rate-limit policy of bucketgrid's front doors: the
// rate-limit service (cmd/bucketgrid), the Envoy filter (wasmfilter) and
// what else decides from envoyproxy/ratelimit's rules. A request's
// descriptors go in (the filter builds them from Envoy's rate-limit
// actions, as Envoy does for the service); the batches of operations to run
// on the buckets come out, keys fit for the door's store; then the
// decision, each descriptor's status and the values of the rate-limit
// headers, from the results of those batches. It is pure (no clock, no I/O, no
// globals) and links neither fmt nor net/http nor YAML, so the Envoy filter
// runs exactly the rules the service runs; package rulefile reads the YAML
// files.
//
// # Use
//
// A door calls the rules once each way. It compiles the documents
// (rulefile.Load reads files); for each request it hands Plan the request's
// descriptors and its Settings (headers, global shadow and quota mode, the
// longest key its store holds) and gets one Plan: the batches of operations
// to execute, each atomically on the bucket of its Key (created from its
// Config when absent). It executes them and hands every Outcome back to
// Decide at once, which returns the Decision: the request's code, each
// descriptor's status (shares, quota and shadow mode applied) and the
// header fields.
//
//	rules, err := rulefile.Load(files, policy.Options{})
//	plan, err := rules.Plan(&req, &policy.Settings{Headers: policy.IETFHeaders})
//	outcomes := make([]policy.Outcome, len(plan.Batches))
//	for i, b := range plan.Batches {
//		outcomes[i].Results, err = run(b.Key, b.Config, b.Ops) // one batch
//	}
//	d, err := plan.Decide(outcomes, now)
//
// # Format and matching
//
// Everything envoyproxy/ratelimit reads is read the same way, and every file
// it rejects is rejected with its message: domains, nested descriptors,
// key/value and key-only nodes, wildcard values ending in '*', the most
// specific node first (key and value, then wildcards in file order, then the
// key alone), limits only at the descriptor's depth, unlimited, a limit of
// 0 requests (refuses everything), name/replaces, shadow_mode, quota_mode,
// share_threshold, detailed_metric and value_to_metric. Envoy's
// per-descriptor hits_addend (0 checks without charging) and limit overrides
// are honoured. Two keys are added to rate_limit: algorithm and burst.
//
// # Counters
//
// A bucket is keyed by the domain and the descriptor's entries only, as
// envoyproxy/ratelimit keys its counters: a limit override and the
// configured rule for the same entries count in one bucket, and a reload
// that changes a limit resets no one. Every batch starts by replacing the
// bucket's configuration by the rule's with consumed tokens inherited (a
// replacement by the stored configuration changes nothing).
//
// # Algorithms
//
// FixedWindow (the default) answers exactly as envoyproxy/ratelimit does:
// the same code and limit_remaining for every request, refused hits
// counted, windows aligned to the Unix epoch. It is stored as an
// intervally-aligned bucket whose size depends on the unit only (see
// Batch.Config), so it needs no counter store and any executor runs it.
// TokenBucket is a greedy bucket of burst tokens refilled at
// requests_per_unit per unit; refused hits are not charged, and there is no
// boundary at which twice the limit gets through. Set it per rule
// (algorithm: token_bucket) or for every rule (Options).
//
// FixedWindow is the default because a drop-in replacement should decide as
// the service it replaces until its operator chooses otherwise: clients
// that rely on a window reset (a batch job that spends its quota at the top
// of the hour) keep working, and a migration can be checked request for
// request. Switching a rule to token_bucket is one line.
//
// # Time
//
// Every wait and reset in a Status comes from the results of the
// operations, that is from the clock of the side that ran them (a grid
// owner, the filter's host). Decide reads its now argument only for the end
// of a fixed window nothing has been counted in yet, or one decided from a
// share (Outcome.Shares), which lives in the deciding process.
//
// # Differences from envoyproxy/ratelimit
//
//   - Limits above 999,999,999 requests per second are rejected at load (a
//     bucket refills at most one token per nanosecond).
//   - A request with more than MaxDescriptors descriptors, MaxEntries
//     entries in a descriptor, MaxDescriptorBytes of keys and values in a
//     descriptor, or a domain that is not valid UTF-8 is refused as a whole
//     (the service answers a client's oversized descriptor OVER_LIMIT, never
//     an error Envoy's failure_mode_deny would let through). Keys and values
//     are bytes: one that is not valid UTF-8 (a header Envoy copied) is
//     matched and counted like any other, as envoyproxy/ratelimit does; the
//     service reads it off gRPC as bytes (cmd/bucketgrid/internal/wire).
//   - A change of a fixed window's unit keeps the count, except a change to
//     a second, which starts the window afresh; a change of algorithm
//     starts a fresh bucket. envoyproxy/ratelimit counts a new unit's
//     window from 0.
//   - Per-descriptor limit overrides with an unknown unit are refused
//     rather than crashing the service.
package policy
