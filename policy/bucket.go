package policy

import (
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/internal/header"
)

// MaxKeyBytes bounds bucket keys: a longer key keeps its "rls/" prefix and
// has the rest replaced by core.DigestKey of it, so every store (Couchbase
// allows 250 bytes) can hold every key.
const MaxKeyBytes = 200

// bucketKey returns the key of the bucket counting entries of domain under r:
// "rls/" + the quoted domain + "/key=value"… (quoted, ASCII only, so no two
// descriptors share a key by accident of their characters), share_threshold
// patterns in place of the values they share. The limit is not part of it:
// an override, a reload that changes requests_per_unit, and the configured
// rule all count in one bucket, whose configuration the operations replace
// in place (see Ops), as envoyproxy/ratelimit counts them in one counter.
func bucketKey(domain string, entries []Entry, r *Rule) string {
	b := make([]byte, 0, 64)
	b = append(b, "rls/"...)
	b = strconv.AppendQuoteToASCII(b, domain)
	for i, e := range entries {
		v := e.Value
		if r.share != nil && r.share[i] != "" {
			v = r.share[i]
		}
		b = append(b, '/')
		b = strconv.AppendQuoteToASCII(b, e.Key)
		b = append(b, '=')
		b = strconv.AppendQuoteToASCII(b, v)
	}
	if len(b) > MaxKeyBytes {
		b = append(b[:len("rls/")], core.DigestKey(string(b[len("rls/"):]))...)
	}
	return string(b)
}

// A fixed window is stored as an intervally-aligned bucket of W tokens
// refilled to W at every unit boundary since the epoch, where W does not
// depend on the limit: holding t tokens means count = W-t hits so far in
// the window, and a request of h hits is over the limit n when the count
// after it exceeds n. Every hit takes a token (refused hits are counted, as
// in envoyproxy/ratelimit) until the bucket is empty, which W > n makes
// "over" for every limit of the unit. Because W is the unit's, not the
// limit's, a change of the limit (an override, a reload) changes nothing
// stored: the count goes on.
var epoch = time.Unix(0, 0)

// windowTokens returns W for unit u: above every limit the unit allows
// (requests_per_unit is a uint32, and at most maxPerSecond a second) and
// within core's refill ceiling of one token per nanosecond. Every unit
// above a second shares W, so a change between them keeps the count as is.
func windowTokens(u Unit) int64 {
	if u == unitSecond {
		return maxPerSecond + 1
	}
	return 1 << 32
}

// Bandwidth IDs of the two algorithms: a change of algorithm replaces an
// unmatched bandwidth, which starts fresh (see core.TokensInheritance).
const (
	windowID = "window"
	bucketID = "bucket"
)

// BucketConfig returns the configuration of it's bucket: for FixedWindow
// the bucket described above, for TokenBucket a greedy bandwidth of
// capacity() tokens refilled at RequestsPerUnit per Unit. It is valid for
// every limited item except a token bucket of 0 requests, which needs no
// bucket (see Ops).
func (it *item) BucketConfig() core.Config {
	if it.config.Bandwidths == nil {
		it.setConfig()
	}
	return it.config
}

// setConfig fills it.config, whose bandwidth lives in the item itself.
func (it *item) setConfig() {
	l := &it.Rule.Limit
	var bw core.Bandwidth
	if l.Algorithm == TokenBucket {
		bw = core.Greedy(int64(l.capacity()), int64(l.RequestsPerUnit), l.Unit.Duration())
		bw.ID = bucketID
	} else {
		w := windowTokens(l.Unit)
		bw = core.IntervallyAligned(w, w, l.Unit.Duration(), epoch)
		bw.ID = windowID
	}
	it.band[0] = bw
	it.config = core.Config{Bandwidths: it.band[:]}
}

// Reserved returns the tokens of r's bucket that no hit may take without
// going over the limit: W−n for a fixed window of n, whose bucket holds W
// and counts W−tokens hits; 0 for a token bucket. Whoever takes tokens from
// the bucket for later hits (a quota lease) takes only what lies above it.
func (r *Rule) Reserved() int64 {
	if r.Algorithm == TokenBucket {
		return 0
	}
	return windowTokens(r.Unit) - int64(r.RequestsPerUnit)
}

// NeedsBucket reports whether it is counted in a bucket, that is, whether
// Ops is not nil.
func (it *item) NeedsBucket() bool {
	return it.Kind == limited && (it.Rule.Algorithm != TokenBucket || it.Rule.RequestsPerUnit > 0)
}

// opCount is len(it.Ops()), without building them.
func (it *item) opCount() int {
	switch {
	case !it.NeedsBucket():
		return 0
	case it.Hits == 0 && it.Rule.Algorithm == TokenBucket:
		return 3
	case it.Hits == 0 || it.Rule.Algorithm == TokenBucket:
		return 2
	}
	return 3
}

// Ops returns the operations to run atomically, as one batch, on it's
// bucket; nil when the item needs no bucket (noLimit, unlimited, and a
// token bucket of 0 requests, which refuses everything).
//
// The first operation replaces the bucket's configuration by BucketConfig
// with core.InheritAdditive: a bucket stored by
// another limit for the same entries keeps what was consumed from it. A
// replacement by the configuration already stored changes nothing.
//
// A check of 0 hits charges nothing. On a fixed window it is over the limit
// only once the window's count exceeds the limit, as in envoyproxy/ratelimit;
// on a token bucket, which never goes over, it is over when not one token is
// left. The last operation's results carry the executing side's time until
// the window ends or the bucket is full, so no other clock is read. The
// operations are held in it: a later call replaces them.
func (it *item) Ops() []wire.Op {
	if !it.NeedsBucket() {
		return nil
	}
	if it.config.Bandwidths == nil {
		it.setConfig()
	}
	replace := wire.Op{Kind: wire.OpReplaceConfiguration, Config: &it.config, Inheritance: core.InheritAdditive}
	l := &it.Rule.Limit
	if l.Algorithm == TokenBucket {
		c := int64(l.capacity())
		if it.Hits == 0 {
			// the last is refused on every bucket (more than the rule's
			// capacity, so more than any share's) and reports the time
			// until full of whichever bucket runs it
			return append(it.ops[:0], replace, wire.Op{Kind: wire.OpEstimate, Tokens: 1}, wire.Op{Kind: wire.OpTryConsumeAndReturnRemaining, Tokens: c + 1})
		}
		// more than the capacity is refused whatever the state
		return append(it.ops[:0], replace, wire.Op{Kind: wire.OpTryConsumeAndReturnRemaining, Tokens: clampHits(it.Hits, c+1)})
	}
	w := windowTokens(l.Unit)
	if it.Hits == 0 {
		return append(it.ops[:0], replace, wire.Op{Kind: wire.OpEstimate, Tokens: w})
	}
	return append(it.ops[:0], replace, wire.Op{Kind: wire.OpTryConsumeAsMuchAsPossible, Tokens: clampHits(it.Hits, w)},
		wire.Op{Kind: wire.OpEstimate, Tokens: w})
}

func clampHits(h uint64, most int64) int64 {
	if h > uint64(most) {
		return most
	}
	return int64(h)
}

// errResults is Decide's error for results that do not answer Ops (a
// misbehaving executor).
var errResults = errors.New("policy: results do not answer the operations")

// Code is a descriptor's or a request's answer; its values are the Envoy
// API's RateLimitResponse.Code, so a conversion is a plain cast: OK is 1,
// OverLimit 2.
type Code int32

const (
	// codeOK (OK) admits the request.
	codeOK Code = 1
	// OverLimit refuses it.
	OverLimit Code = 2
)

// String returns the Envoy API's name of the code.
func (c Code) String() string {
	switch c {
	case codeOK:
		return "OK"
	case OverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// never is the retryAfter of hits that no wait admits (more than the
// capacity, or a limit of 0).
const never = time.Duration(math.MaxInt64)

// Status is the answer for one descriptor, and what it adds to the metrics.
type Status struct {
	// Code is the answer: OverLimit only when the limit refused the hits
	// and neither shadow nor quota mode turned that into OK.
	Code Code
	// Over reports that the limit refused the hits, whatever Code says.
	Over bool
	// Remaining is envoyproxy/ratelimit's limit_remaining: the hits still
	// admitted now, 0 when over; math.MaxUint32 for an unlimited rule.
	Remaining uint32
	// ResetAfter is the duration until the limit is whole again: the end of
	// the window (envoyproxy/ratelimit's duration_until_reset, whole
	// seconds), or until the token bucket is full.
	ResetAfter time.Duration
	// retryAfter is, when Over, how long until the hits could be admitted;
	// never when no wait admits them; 0 when not Over. The headers report
	// it (RetryAfterHeader, the IETF fields' t).
	retryAfter time.Duration
	// Rule is the rule counted, nil when no limit applies or the rule is
	// unlimited. Under Settings.QuotaMode its QuotaMode is set when it
	// turned an over-limit status into OK.
	Rule *Rule
	// what the status adds to the metrics (see Counts)
	hits, withinHits, nearHits, overHits, shadowHits uint64
}

// Counts returns what s adds to envoyproxy/ratelimit's metrics: the
// descriptor's hits (those charged, or those a Plan.HoldBack held back,
// which count as within the limit), and of them those within the limit,
// near it (above Options.NearLimitRatio of it), over it, and over it but
// let through by shadow mode.
func (s *Status) Counts() (hits, within, near, over, shadow uint64) {
	return s.hits, s.withinHits, s.nearHits, s.overHits, s.shadowHits
}

// Decide turns the results of Ops into the descriptor's status. Every wait
// and reset comes from the results, that is from the clock of the side that
// ran the operations; now (that side's time, when the caller knows it, or
// the caller's own) is read only for the end of a fixed window nothing has
// been counted in yet. It returns an error only when results do not answer Ops (a
// misbehaving executor). noLimit and Unlimited items take nil results.
func (it *item) Decide(results []wire.Result, now time.Time) (Status, error) {
	switch it.Kind {
	case noLimit:
		return Status{Code: codeOK}, nil
	case unlimited:
		return Status{Code: codeOK, Remaining: math.MaxUint32}, nil
	}
	if want := it.opCount(); len(results) != want {
		return Status{}, errResults
	}
	var s Status
	if it.Rule.Algorithm == TokenBucket {
		s = it.decideBucket(results)
	} else {
		s = it.decideWindow(results, now)
	}
	if s.Over {
		switch {
		case it.Rule.ShadowMode:
			s.Code = codeOK
		case it.Rule.QuotaMode:
			s.Code = codeOK
		}
	}
	if !s.Over || !it.Rule.ShadowMode {
		s.shadowHits = 0
	}
	return s, nil
}

func (it *item) decideWindow(res []wire.Result, now time.Time) Status {
	n := uint64(it.Rule.RequestsPerUnit)
	h := it.Hits
	w := it.window()
	est := res[len(res)-1]
	t := min(max(est.Tokens, 0), w)
	var took int64
	if h > 0 {
		took = min(max(res[1].Tokens, 0), w-t)
	}
	before := uint64(w - t - took)
	after := before + h
	if after < before {
		after = math.MaxUint64
	}
	over := after > n
	// the executing side's time until the window ends, in whole seconds
	// as envoyproxy/ratelimit counts it; a window nothing was counted in
	// (a check of 0 hits) has no end to report, and takes now's
	reset := time.Duration(header.CeilSeconds(time.Duration(est.Wait))) * time.Second
	// a share holds less than the whole window the estimate asks for, so
	// its wait is never: its window ends at the unit's boundary on now,
	// the deciding side's clock
	if est.Wait <= 0 || it.shares > 1 {
		unit := it.Rule.Unit.seconds()
		reset = time.Duration(unit-now.Unix()%unit) * time.Second
	}
	s := Status{Code: codeOK, Over: over, ResetAfter: reset}
	if over {
		s.Code = OverLimit
		s.retryAfter = reset
		if h > n {
			s.retryAfter = never
		}
	} else {
		s.Remaining = uint32(n - after)
	}
	s.count(n, before, after, h, it.nearRatio)
	return s
}

func (it *item) decideBucket(res []wire.Result) Status {
	c := uint64(it.Rule.capacity())
	h := it.Hits
	if it.Rule.RequestsPerUnit == 0 {
		s := Status{Code: OverLimit, Over: true, retryAfter: never}
		s.count(0, 0, h, h, 0)
		return s
	}
	var s Status
	var avail uint64
	if h == 0 {
		avail = uint64(max(res[1].Tokens, 0))
		s = Status{Over: !res[1].OK, ResetAfter: time.Duration(res[2].Reset), retryAfter: time.Duration(res[1].Wait)}
		if !s.Over {
			s.Remaining = uint32(min(avail, math.MaxUint32))
		}
	} else {
		r := res[1]
		avail = uint64(max(r.Tokens, 0))
		s = Status{Over: !r.OK, ResetAfter: time.Duration(r.Reset)}
		if r.OK {
			s.Remaining = uint32(min(avail, math.MaxUint32))
			avail += h
		} else {
			s.retryAfter = time.Duration(r.Wait)
		}
	}
	s.Code = codeOK
	if s.Over {
		s.Code = OverLimit
	} else {
		s.retryAfter = 0
	}
	before := c - min(avail, c)
	s.count(c, before, before+h, h, it.nearRatio)
	return s
}

// count sets the metric increments as envoyproxy/ratelimit computes them
// from the counts before and after the hits, for a limit of n.
func (s *Status) count(n, before, after, h uint64, ratio float32) {
	near := uint64(math.Floor(float64(float32(n) * ratio)))
	if !s.Over {
		s.withinHits = h
		if after > near {
			if before >= near {
				s.nearHits = h
			} else {
				s.nearHits = after - near
			}
		}
		return
	}
	if before >= n {
		s.overHits, s.shadowHits = h, h
		return
	}
	s.overHits, s.shadowHits = after-n, after-n
	s.nearHits = n - max(near, before)
}

// overall combines the descriptors' statuses into the request's code:
// OverLimit when any descriptor's Code is; with globalShadow (the
// service-wide shadow mode) always codeOK, shadowed reporting that it turned an
// OverLimit into codeOK.
func overall(statuses []Status, globalShadow bool) (code Code, shadowed bool) {
	code = codeOK
	for i := range statuses {
		if statuses[i].Code == OverLimit {
			code = OverLimit
		}
	}
	if code == OverLimit && globalShadow {
		return codeOK, true
	}
	return code, false
}
