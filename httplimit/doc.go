// Package httplimit is net/http middleware that gives every client its own
// token bucket, local (NewLocal, over a bounded localmap.Map) or
// distributed (NewManaged, over any bucketgrid.Manager), and tells the client
// where it stands in the IETF RateLimit header fields.
//
//	plan := httplimit.StaticPlan(core.Config{Bandwidths: []core.Bandwidth{
//		core.Intervally(10, 10, time.Minute).WithID("minute")}})
//	limit := httplimit.New(httplimit.NewLocal(plan, httplimit.WithIdleTimeout(10*time.Minute)),
//		httplimit.WithKey(httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}.Key),
//		httplimit.WithExcept("GET /healthz"))
//	http.ListenAndServe(":8080", limit.Handler(mux))
//
// # Clients and plans
//
// A KeyFunc names the client: ClientIP (the peer's address, or the address
// trusted proxies recorded in X-Forwarded-For or Forwarded), HeaderKey (an
// API key, with a fallback) or any function. Each key gets its own bucket,
// created from a Plan only when the key is first seen: free and paid plans
// are decided there, from the key.
//
// # Responses
//
// A request that gets its tokens is passed on, with these fields (one item
// per bandwidth, named by its ID, "default" for a lone bandwidth without
// one, or its index):
//
//	RateLimit-Policy: "minute";q=10;w=60, "day";q=1000;w=86400
//	RateLimit: "minute";r=9;t=6, "day";r=999;t=87
//
// q is the bandwidth's capacity and w the seconds an empty bandwidth takes to
// refill to capacity, rounded up: for the classic "n per period" limit, the
// period. r is the bandwidth's tokens; t is the seconds until the bandwidth
// holds more tokens than now (or, when it holds fewer than the request's
// cost, until it holds the cost), rounded up, so that a client waiting t
// seconds never comes back too early; t=0 means the bandwidth is full; t is
// left out when the cost exceeds the bandwidth's capacity. With
// WithHeaders(policy.IETFHeaders|policy.XRateLimitHeaders),
// X-RateLimit-Limit and X-RateLimit-Remaining describe the tightest
// bandwidth (fewest tokens) and X-RateLimit-Reset is the seconds until the
// whole bucket is full, rounded up; policy.DraftHeaders writes the same
// values as RateLimit-Limit, -Remaining and -Reset. Package policy renders
// every field and rounds every wait, as it does for the rate-limit service
// and the Envoy filter.
//
// A request refused by its bucket gets 429 with Retry-After in delay-seconds
// (the probe's WaitForRefill rounded up, at least 1: never before the
// refill that admits it), Cache-Control: no-store, the fields above, and an
// RFC 9457 application/problem+json body naming the limits that refused it.
//
// # Failures
//
// No client can open the gate. Only an outage — a store error, no answer
// within WithTimeout, a grid owner out of reach, a Plan error that does not
// wrap core.ErrInvalidKey — gets the failure mode: served unlimited
// (WithFailOpen(true), the default) or refused with 503 and a problem body.
// Everything else is decided without it:
//
//   - A key the KeyFunc refuses, or the backend cannot hold (an error
//     wrapping core.ErrInvalidKey, returned before any I/O: Couchbase's
//     250 bytes, MongoDB's UTF-8 rule…; a Plan may return one for an unknown
//     API key), is answered 400 with a fixed message, never the error's
//     text nor the key. bucketgrid.WithFitKeys gives such keys buckets of
//     their own instead.
//   - A corrupt stored record is replaced by a new bucket under
//     default and refused with 503 under
//     bucketgrid.WithRecoveryFail; an invalid configuration from the Plan, a request the
//     executor refuses, and a key so contended that the executor gave up
//     (cas.ErrConflict) are refused with 503, whatever the failure mode.
//   - A panic in the limiter (key function, store, executor, plan) is
//     re-raised on the request's goroutine: the request is never served
//     (see Stats.Panicked).
//
// Every request lands in one Stats counter, and every failure reaches the
// WithErrorHook function with its cause. Keys in errors are redacted
// (core.RedactKey).
//
// The failure mode is also what a distributed bucket's clients get while
// its backend cannot answer at all: when a grid/olric member crashes, the
// keys it owned are unavailable until memberlist declares it dead and a new
// owner takes over (measured in grid/olric's README, "Faults on a real
// network"), longer than DefaultTimeout. Under fail-open those
// clients are unlimited meanwhile; fail closed, or choose WithTimeout above
// the window, if that matters more than latency, or degrade: with
// WithDegrade on NewManaged, outages are decided from a local share of each
// client's limit (the limit divided by the instances), served or refused
// with 429, counted in Stats.DegradedAllowed and Stats.DegradedLimited, with
// headers describing the share; see bucketgrid.Degrade.
//
// # What is exact
//
// The decision (served or 429) and Retry-After come from core's probe for
// the request itself and are exact. RateLimit-Policy is the configuration of
// the bucket. Per-bandwidth r and t come from a snapshot of the bucket's
// state, to which core's own arithmetic is applied at a clock reading taken
// after the snapshot:
//
//   - NewLocal takes the snapshot under the same lock as the decision, and
//     NewManaged gets it in the same answer as the decision (one round trip,
//     the state the decision wrote): exact, as long as WithClock reads the
//     same clock as the executing side (for the cas executor, this process's
//     wall clock; for a grid owner, the owner's).
//   - A Buckets of your own may report only the probe (Usage.Bands nil): the
//     minimum over bandwidths. Each item then carries that minimum as r,
//     exact for the tightest bandwidth and a lower bound for the others, and
//     as t the wait of the whole bucket (the refill that admits the request
//     when refused, the time to full otherwise): an upper bound, never early.
//     For a configuration of one bandwidth r is exact.
//
// Policy identifiers are RFC 9651 Strings: bytes outside printable ASCII in a
// bandwidth ID are written as '?'. Integers are capped at 999,999,999,999,999
// and negative token counts (overdraft) are written as 0.
package httplimit
