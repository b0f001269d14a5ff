// Package quota is Envoy's Rate Limit Quota Service (RLQS,
// envoy.service.rate_limit_quota.v3) over the grid: Envoys that report a
// bucket share its grid bucket, each deciding locally with a token bucket
// the server assigns it, and the grid bucket stays the truth.
//
// # Buckets and rules
//
// A bucket id (the map Envoy's bucket_id_builder builds) is a descriptor of
// the stream's domain for the RLS's own rules (policy), its entries in
// whatever order a rule nests them (every order of up to four entries is
// tried, key order first). A limited rule's Envoys share the rule's grid
// bucket, the very bucket the RLS charges for the same descriptor, so RLS
// and RLQS clients share one limit. Blanket rules: unlimited, shadow and
// quota mode, no rule (unmatched, replaced) → ALLOW_ALL, as the RLS answers
// OK; requests_per_unit 0 and bucket ids the rules refuse (too large, not
// UTF-8) → DENY_ALL.
//
// # Assignments
//
// Every Period (5 s, Envoy's report interval) the server divides the rule's
// rate among the Envoys reporting the bucket by their demand (allowed plus
// denied requests per second, from their reports, with a fifth of headroom,
// never more than the whole rate, since a demand is a client's claim;
// an Envoy not yet measured asks for what the measured ones ask on average,
// at least an even share, and every Envoy gets at least a token while the
// rate lasts), and sends each a token bucket of
// tokens_per_fill = its share per Period, fill_interval = Period, max_tokens
// = Burst of its rate, time to live TTL (2 Periods). A share within a tenth
// of the Envoy's current one is kept, since Envoy restarts its bucket
// whenever the numbers change. A new bucket id is answered at once; an
// Envoy with nothing left to share gets DENY_ALL; a bucket an Envoy stopped
// using for IdleAfter is abandoned. It never sends requests_per_time_unit:
// Envoy's filter ignores such an assignment (the previous one runs on,
// unrenewed) and admits every request under it as a fallback.
//
// # A full table
//
// Bucket ids come from request values, so the table of tracked buckets
// (MaxBuckets a stream, MaxTrackedBytes in all) is the clients' to fill. A
// new id finding it full takes the room of a closed stream's assignment
// (all it may still spend charged to its grid bucket at once), else of the
// least recently used bucket of the stream holding the most bytes while
// that stream still holds at least as much as the newcomer's, else of a
// bucket of its own stream no request used for two periods; else it is
// answered DENY_ALL and not tracked. A stream holding at most an even share
// of MaxTrackedBytes among the open streams, less a bucket, keeps it all.
// An evicted bucket is answered DENY_ALL, its token bucket settled as a
// replaced one's.
//
// # The bound
//
// Every token an assignment can let through is consumed from the grid
// bucket before the assignment is sent: its max_tokens for a new bucket
// (Envoy starts it full), for a replacement only what its max_tokens grew
// by (Envoy carries the replaced bucket's ratio of remaining tokens over,
// and those were paid), and its refill through the end of the next Period
// plus Delivery. Renewals pay their extension; a replaced assignment gives back
// what it had paid beyond the replacement's arrival. An Envoy whose stream
// closed keeps being charged until its assignment's TTL has passed; what
// the grid bucket cannot cover then is a debt paid first from later
// refills. Between Periods the server drains the bucket's refill into a
// reserve (at most 2 Periods of the rate), so that a bucket holding less
// than a Period of its rate can still pay for one.
//
// So, for a token-bucket rule of burst B and rate R, counting every
// consumer of the bucket (RLS clients, other instances) with the Envoys:
//
//   - from the bucket's creation to any time t the Envoys admit at most
//     B + R·t, plus any outstanding debt: no more than the exact bucket;
//   - in any span of length w they admit at most
//     B + R·(w + Period + Delivery) + 2·R·Period + M, where
//     M ≤ n + R·Burst is what n Envoys' buckets may hold when the span
//     starts; for a span of a minute with the defaults that is
//     R·w·(1 + ε) with ε = (B/R + 15.75 s + n/R)/60 s.
//
// The tests check both on simulated Envoys and measure how close the fleet
// runs: within 5% of R over every minute after the first two Periods.
// For a fixed-window rule the same accounting holds in tokens of its
// windows: the Envoys never take a window's reserved tokens (they mean
// "over the limit" to the RLS), and a span admits at most what the windows it
// overlaps, and the Period + Delivery before it, hold.
//
// What the bound assumes: responses reach Envoy within Delivery (250 ms);
// Envoy behaves as its filter's source does (see the tests' client); the
// instance that gave an assignment lives until it expires (a crashed
// instance's assignments run unpaid for at most TTL + Delivery). It does
// not cover what Envoy admits on its own: no_assignment_behavior before a
// bucket's first answer (ALLOW_ALL unless configured), and
// expired_assignment_behavior when a stream is gone longer than TTL. Set
// both to DENY_ALL for a hard bound.
package quota
