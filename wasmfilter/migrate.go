package wasmfilter

// The errors that refuse the filter's former configuration format, which
// had policies of its own; each says what replaces every member of it.
const (
	migratePolicies = `the filter's own "policies" format is no longer read: give envoyproxy/ratelimit's rule format ` +
		`(domain, rate_limits and rules, the files cmd/bucketgrid loads; see examples/envoy). ` +
		`A policy becomes rate_limits entries and rules: key "source.address" → a remote_address action; ` +
		`"header:<name>", ":path", ":authority", ":method" → request_headers (header_name, descriptor_key); ` +
		`match.path_prefix → a header_value_match action on :path with prefix_match; ` +
		`a bandwidth → a rule's rate_limit (requests_per_unit per unit: second to year), ` +
		`with algorithm token_bucket and burst for a capacity above the rate, ` +
		`the default fixed_window (windows aligned to the Unix epoch) for style intervally; ` +
		`several bandwidths → one rate_limits entry each, told apart by a generic_key action ` +
		`(descriptor_value naming the bandwidth) with the rule nested under it; ` +
		`slots → the top-level slots (one slot per descriptor's bucket); ` +
		`name → the descriptors' keys (the metrics are <stat_prefix>.policy.rules.*). ` +
		`Not available: cost (every request is one hit: divide the limits by the cost), ` +
		`a refill other than the rate, bandwidth ids, version (a changed rule keeps the hits counted), ` +
		`and the refund of earlier policies when a later one refuses (every descriptor counts, as the rate-limit service counts)`
	migratePath = `the filter's "path" member is gone: the filter normalises :path before its matchers ` +
		`(query and ';' parameters cut off, escapes and dot segments resolved; raw_path: true turns it off); ` +
		`match a subtree with path_separated_prefix ("/api" counts /api and /api/..., never /apix); ` +
		`ignore_case → a string_match with ignore_case: true`
)
