// Package core is the pure token-bucket model of bucketgrid, the part users
// touch: bandwidths, configurations, bucket state (State) with every Bucket4j
// operation and configuration replacement, probes and diagnostics, keys, and
// the errors of each. The protocol that executors implement — requests,
// responses, Process and the versioned binary codec — is package core/wire,
// built on this one.
//
// Nothing in core performs I/O, starts goroutines or reads a clock: time is
// always an argument, in nanoseconds. Local buckets pass a monotonic reading;
// distributed executors pass wall-clock Unix nanoseconds from the side that
// runs Process. All arithmetic is on integers; where a product would overflow
// 64 bits it is carried out in 128 bits, so no input yields a wrong answer and
// no float appears anywhere in a decision.
//
// wire.Process is the single entry point every executor calls: a CAS loop, a
// grid owner and the proxy-wasm filter all run the same function on stored
// bytes.
//
// # Differences from Bucket4j
//
// The model is Bucket4j 8.19's BucketState64BitsInteger: per bandwidth the
// size, the last refill time and the carried fraction of a token, and every
// operation, probe and replacement strategy computed the same way. Replayed
// operation for operation at the same nanosecond times, a bucket here and a
// Bucket4j bucket hold the same tokens and report the same results, except
// for these deliberate differences. Each is pinned by a TestDifference test
// (in this package or core/wire, or in the root package for 8 and 10).
//
//  1. Waits are rounded up. Every wait (Probe and Estimate waits,
//     ConsumeIgnoringRateLimits, Reserve, Diagnostics.TimeToFull, the
//     ExpireAfterRefill TTL) is the shortest after which the tokens are
//     there, so no caller comes back early; Bucket4j floors a greedy wait,
//     and a caller who sleeps exactly that long can be refused again.
//     Example: Greedy(10, 3, time.Second), empty, one token: 333333334 ns
//     here, 333333333 ns in Bucket4j, when 0.999999999 token exists. The
//     same rounding decides Reserve against maxWait: Reserve(1, 333333333)
//     is refused here and granted by Bucket4j.
//
//  2. Exact arithmetic. Bucket4j falls back to doubles when a 64-bit product
//     overflows (refillTokens×elapsed in refill, where it also drops the
//     carried fraction; period×deficit in a greedy wait; time×refillTokens
//     for adaptive initial tokens) and computes PROPORTIONALLY replacement
//     in doubles always; here all of it is exact, in 128 bits, saturating
//     only at the int64 range. Examples: PROPORTIONALLY from capacity 22 to
//     30 with 11 tokens gives 15 tokens (Bucket4j: 11×(30/22) =
//     14.999999999999998, so 14). Greedy(2e9, 1.25e9, 10*time.Second) with
//     1 initial token, which it gives at 1 ns, holds 1000000000 tokens at
//     8 s (Bucket4j: 1.25e9×7999999999 overflows and its fallback gives
//     999999999; the carried 1/8 of a token is what makes the difference,
//     so a bucket started full or empty agrees). Bucket4j also wraps around
//     where it multiplies without a check: an aligned first refill after
//     2262-04-11 turns into an unrelated instant there (one just after it
//     into 1677), and is rejected here (ErrFirstRefill). And it subtracts
//     without one: a size taken below the long range by a deep overdraft
//     (ConsumeIgnoringRateLimits, reservations) wraps around to a huge
//     positive count of tokens there, and a time difference beyond it to a
//     negative one; here a debit that would leave the int64 range is
//     refused and differences saturate.
//
//  3. A greedy wait counts from the last refill when the clock reads earlier
//     than it (clock skew between clients of a shared store, a clock stepped
//     back). Bucket4j's greedy wait ignores the current time and comes out
//     short by the gap; intervally waits count from the last refill in both.
//     Example: Greedy(10, 10, time.Second), empty, last refilled at 10 s,
//     asked at 9.5 s for one token: 600 ms here, 100 ms in Bucket4j (nothing
//     has refilled at 9.6 s). In both, a clock reading earlier than the last
//     refill mints nothing.
//
//  4. ReplaceConfiguration chooses each matched bandwidth's last refill time
//     so that the replacement mints nothing for the time before it; Bucket4j
//     keeps the old bandwidth's. A new aligned bandwidth takes the latest
//     boundary of its own alignment at or before now (FirstRefill − period
//     before the first refill); an intervally bandwidth replacing an
//     intervally one of the same period keeps the old time (the phase, as in
//     Bucket4j); any other takes the later of the old time and now. Examples:
//     Intervally(100, 100, time.Hour), empty at 0, replaced AS_IS at 59 min
//     by Intervally(100, 10, time.Minute): 0 tokens until 60 min here, 100 at
//     once in Bucket4j (59 new periods counted from 0). A greedy bandwidth
//     replaced at 16:20 by an hourly IntervallyAligned to 17:00 refills at
//     17:00, 18:00, … here and at 17:20, 18:20, … in Bucket4j.
//
//  5. The carried fraction of a token is rescaled exactly on replacement.
//     AS_IS and ADDITIVE between greedy bandwidths keep a fraction f of a
//     token as f×newPeriod; Bucket4j computes (long) roundingScale ×
//     roundingError, truncating the period ratio to an integer first: it
//     keeps 2× for a ratio of 2.5 and drops the fraction whenever the new
//     period is shorter. Example: 10 per second, empty at 0, replaced AS_IS
//     at 150 ms by 10 per 500 ms: 2 tokens at 175 ms here, 1 in Bucket4j.
//
//  6. Blocking consumption of more tokens than a capacity is refused at
//     once. Bucket4j's blocking and scheduling tryConsume and consume
//     reserve such a request into overdraft and wait for the deficit;
//     State.Reserve never reserves more than the smallest capacity (it
//     returns math.MaxInt64 and takes nothing; OpReserve's result carries
//     that capacity), and the root package's Consume
//     returns ErrExceedsCapacity without waiting, as x/time/rate's WaitN does
//     above the burst. Example: full Greedy(10, 10, time.Second), blocking
//     consume of 15: an error here; Bucket4j waits 500 ms and leaves −5,
//     and so does its tryConsume(15, maxWait) with a maxWait of at least
//     500 ms, which then answers true (tryConsume(15, 1s): true after
//     500 ms, −5 left). ConsumeIgnoringRateLimits still overdraws as in
//     Bucket4j.
//
//  7. Reserve accepts a maxWait of zero: take the tokens only if they are
//     there now. Bucket4j requires a positive maxWaitTimeNanos. Process
//     rejects a negative Op.MaxWait; the root package's Consume asks for
//     the time its context's deadline leaves, zero once it has passed.
//
//  8. An interrupted wait gives its tokens back. The root package's Consume
//     reserves first and, when the context ends during
//     the wait, return the tokens with AddTokens (capped at capacity), so a
//     failed call has taken nothing; Bucket4j's blocking bucket keeps an
//     interrupted thread's reservation. Example: 4 tokens of
//     Greedy(10, 10, time.Second), a 6-token wait cancelled: 4 tokens here,
//     −2 in Bucket4j.
//
//  9. An aligned first refill is kept to the nanosecond; Bucket4j keeps
//     Instant.toEpochMilli(), rounded down to the millisecond. Example: a
//     first refill at 17:00:00.000000500 refills at that instant here and at
//     17:00:00.000 in Bucket4j.
//
//  10. Clocks. Local buckets of the root package default to a monotonic
//     nanosecond clock, Bucket4j's to System.currentTimeMillis: by default
//     every operation sees nanosecond time here, and aligned styles are
//     refused (ErrNeedsWallClock) until a wall clock is chosen; package
//     clock's WallMillis reproduces Bucket4j's millisecond steps.
//
//  11. The ExpireAfterRefill TTL is the time to full plus the margin in
//     nanoseconds (rounded up, at least MinTTL), and none when the bucket
//     cannot be full within the int64 range; Bucket4j adds whole
//     milliseconds, rounded down, and gives such a bucket about 292 years.
//     Example: Greedy(10, 3, time.Second) one token short, margin 1 s:
//     1333333334 ns here, 1333 ms in Bucket4j.
//
//  12. Validation limits. A configuration has at most MaxBandwidths (32)
//     bandwidths, and an ID at most MaxIDLen (255) bytes; Bucket4j has no
//     limit. An empty ID means none: two bandwidths with ID "" are two
//     anonymous bandwidths here (Bucket4j tells "" from null and rejects them
//     as duplicates), and on replacement "" follows the anonymous rule. An
//     aligned FirstRefill must lie between the epoch and 2262-04-11 (int64
//     Unix nanoseconds); Bucket4j rejects one before the epoch too but wraps
//     after 2262 (see 2). Aligned styles need a wall clock here
//     (ValidateForClock), as with Bucket4j's local builder.
//
//  13. Verbose diagnostics. The Diagnostics of a request (Request.Verbose,
//     OpGetConfiguration) is one snapshot taken after all its operations,
//     without an operation time; Bucket4j's VerboseResult belongs to a
//     single operation and carries operationTimeNanos.
//
// Everything else follows Bucket4j, including what might look like a
// difference: Probe.Remaining and Estimate.Remaining are never below zero
// while AvailableTokens and Diagnostics.Available report an overdraft as a
// negative balance; a request above a capacity gets a wait of math.MaxInt64
// from the probes; ForceAddTokens may exceed capacity, refill then pauses
// (keeping the carried fraction) until consumption brings the bandwidth
// below, and AddTokens or a refill that reaches capacity drops the fraction;
// replacement fills a bandwidth at or above its old capacity to the new
// capacity (PROPORTIONALLY, ADDITIVE) or caps it there (AS_IS), and matches
// bandwidths by ID, an anonymous one only when each configuration has
// exactly one; ConsumeIgnoringRateLimits takes nothing when the debt or its
// wait would leave the int64 range (Bucket4j throws).
package core
