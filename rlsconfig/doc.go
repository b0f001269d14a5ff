// Package rlsconfig is the configuration and descriptor matching of
// bucketgrid's Envoy rate-limit service: envoyproxy/ratelimit's YAML format
// unchanged in, and for each request descriptor the bucket key, the bucket
// configuration and the operations to run on it out. It is pure (no clock,
// no I/O, no globals) and depends on core and a YAML library only, so the
// same rules can run in the service (cmd/bucketgrid), in process, or
// anywhere a core.Process runs.
//
// # Use
//
// Load the files, then for each ShouldRateLimit request Plan it, run each
// Limited item's Ops on the bucket of its Key (created from BucketConfig
// when absent) as one atomic batch, and Decide its status from the results:
//
//	cfg, err := rlsconfig.Load(files, rlsconfig.Options{})
//	items, err := cfg.Plan(&req)
//	for i := range items {
//		res := run(items[i].Key, items[i].BucketConfig(), items[i].Ops()) // one batch
//		statuses[i], err = items[i].Decide(res, time.Now())
//	}
//	code, _ := rlsconfig.Overall(statuses, globalShadowMode)
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
// # Algorithms
//
// FixedWindow (the default) answers exactly as envoyproxy/ratelimit does:
// the same code and limit_remaining for every request, refused hits
// counted, windows aligned to the Unix epoch. It is stored as an
// intervally-aligned bucket (see BucketConfig), so it needs no counter
// store: any executor runs it. TokenBucket is a greedy bucket of burst
// tokens refilled at requests_per_unit per unit; refused hits are not
// charged, and there is no boundary at which twice the limit gets through.
// Set it per rule (algorithm: token_bucket) or for every rule (Options).
//
// FixedWindow is the default because a drop-in replacement should decide as
// the service it replaces until its operator chooses otherwise: clients
// that rely on a window reset (a batch job that spends its quota at the top
// of the hour) keep working, and a migration can be checked request for
// request. Switching a rule to token_bucket is one line.
//
// # Differences from envoyproxy/ratelimit
//
//   - Limits above 999,999,999 requests per second are rejected at load (a
//     bucket refills at most one token per nanosecond).
//   - A request with more than MaxDescriptors descriptors or MaxEntries
//     entries in a descriptor, or a domain that is not valid UTF-8, is
//     refused as a whole (InvalidArgument: the route configuration's
//     doing). One with more than MaxDescriptorBytes of keys and values in a
//     descriptor is answered OVER_LIMIT by the service, as its values are a
//     client's. Keys and values are bytes: one that is not valid UTF-8 (a
//     header Envoy copied) is matched and counted like any other, as
//     envoyproxy/ratelimit does; the service reads it off gRPC as bytes.
//   - A rule whose numbers change starts fresh buckets: the key holds the
//     limit (envoyproxy/ratelimit keeps counting the current window).
//   - Per-descriptor limit overrides with an unknown unit are refused
//     rather than crashing the service.
package rlsconfig
