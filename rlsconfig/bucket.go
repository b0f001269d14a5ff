package rlsconfig

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// MaxKeyBytes bounds bucket keys: a longer key keeps its limit tag and has
// the rest replaced by core.DigestKey of it, so every store (Couchbase allows
// 250 bytes) can hold every key.
const MaxKeyBytes = 200

// bucketKey builds the key of rule r's bucket for a descriptor of domain:
// "rls/" + the limit's tag + "/" + the quoted domain + "/key=value"… (quoted,
// ASCII only, so no two descriptors share a key by accident of their
// characters). The tag holds the algorithm and numbers, so a rule whose
// numbers change starts new buckets, and two rules never share one.
func bucketKey(domain string, entries []Entry, r *Rule) string {
	b := make([]byte, 0, 64)
	b = append(b, "rls/"...)
	b = appendTag(b, &r.Limit)
	b = append(b, '/')
	tagged := len(b)
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
		b = append(b[:tagged], core.DigestKey(string(b[tagged:]))...)
	}
	return string(b)
}

// appendTag appends "fw10/60s" (fixed window, 10 per 60 s) or "tb10/60s+20"
// (token bucket, burst 20).
func appendTag(b []byte, l *Limit) []byte {
	if l.Algorithm == TokenBucket {
		b = append(b, "tb"...)
	} else {
		b = append(b, "fw"...)
	}
	b = strconv.AppendUint(b, uint64(l.RequestsPerUnit), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, l.Unit.Seconds(), 10)
	b = append(b, 's')
	if l.Algorithm == TokenBucket && l.Burst > 0 {
		b = append(b, '+')
		b = strconv.AppendUint(b, uint64(l.Burst), 10)
	}
	return b
}

// A fixed window of n hits is stored as an intervally-aligned bucket of n+1
// tokens refilled to n+1 at every unit boundary since the epoch. Holding t
// tokens means count = n+1-t hits so far in the window while t ≥ 1, and
// "over the limit" (count > n) at t = 0. A request of h hits takes as many
// tokens as it can, up to h: with t ≥ h+1 that leaves t-h ≥ 1 (admitted,
// n+1-(t-h) counted), otherwise it leaves 0 (over the limit, where a window
// stays until it ends, since every hit adds to the count). That is
// envoyproxy/ratelimit's counter, which is charged even by refused hits, in
// one atomic batch of existing operations: a refused hit is counted, a
// check of 0 hits tells "exactly at the limit" (OK) from "over" (refused),
// and the boundary refill resets any state to a fresh window.
var epoch = time.Unix(0, 0)

// BucketConfig returns the configuration of it's bucket: for FixedWindow
// the bucket described above, for TokenBucket a greedy bandwidth of
// Capacity tokens refilled at RequestsPerUnit per Unit. It is valid for
// every Limited item except a token bucket of 0 requests, which needs no
// bucket (see Ops).
func (it *Item) BucketConfig() core.Config {
	l := &it.Rule.Limit
	n := int64(l.RequestsPerUnit)
	if l.Algorithm == TokenBucket {
		return core.Config{Bandwidths: []core.Bandwidth{core.Greedy(int64(l.Capacity()), n, l.Unit.Duration())}}
	}
	return core.Config{Bandwidths: []core.Bandwidth{core.IntervallyAligned(n+1, n+1, l.Unit.Duration(), epoch)}}
}

// Policy returns the limit as clients should see it in rate-limit headers:
// a bandwidth of Capacity requests refilled RequestsPerUnit per Unit, at
// once (fixed window) or greedily (token bucket), named by the rule's name
// or else its configuration path.
func (r *Rule) Policy() core.Bandwidth {
	l := &r.Limit
	n := int64(l.RequestsPerUnit)
	bw := core.Intervally(n, n, l.Unit.Duration())
	if l.Algorithm == TokenBucket && n > 0 {
		bw = core.Greedy(int64(l.Capacity()), n, l.Unit.Duration())
	}
	bw.ID = r.Name
	if bw.ID == "" {
		bw.ID = r.Path
	}
	return bw
}

// NeedsBucket reports whether it is counted in a bucket, that is, whether
// Ops is not nil.
func (it *Item) NeedsBucket() bool {
	return it.Kind == Limited && (it.Rule.Algorithm != TokenBucket || it.Rule.RequestsPerUnit > 0)
}

// opCount is len(it.Ops()), without building them.
func (it *Item) opCount() int {
	switch {
	case !it.NeedsBucket():
		return 0
	case it.Hits == 0 && it.Rule.Algorithm == FixedWindow:
		return 1
	case it.Hits > 0 && it.Rule.Algorithm == TokenBucket:
		return 1
	}
	return 2
}

// Ops returns the operations to run atomically, as one batch, on it's
// bucket; nil when the item needs no bucket (NoLimit, Unlimited, and a
// token bucket of 0 requests, which refuses everything).
//
// A check of 0 hits charges nothing. On a fixed window it is over the limit
// only once the window's count exceeds the limit, as in envoyproxy/ratelimit;
// on a token bucket, which never goes over, it is over when not one token is
// left.
func (it *Item) Ops() []wire.Op {
	if !it.NeedsBucket() {
		return nil
	}
	l := &it.Rule.Limit
	n := int64(l.RequestsPerUnit)
	if l.Algorithm == TokenBucket {
		c := int64(l.Capacity())
		if it.Hits == 0 {
			return []wire.Op{{Kind: wire.OpEstimate, Tokens: 1}, {Kind: wire.OpEstimate, Tokens: c}}
		}
		// more than the capacity is refused whatever the state
		return []wire.Op{{Kind: wire.OpTryConsumeAndReturnRemaining, Tokens: clampHits(it.Hits, c+1)}}
	}
	if it.Hits == 0 {
		return []wire.Op{{Kind: wire.OpAvailableTokens}}
	}
	// more than n+1 hits leave 0 tokens whatever the state, like n+1
	return []wire.Op{{Kind: wire.OpTryConsumeAsMuchAsPossible, Tokens: clampHits(it.Hits, n+1)},
		{Kind: wire.OpAvailableTokens}}
}

func clampHits(h uint64, most int64) int64 {
	if h > uint64(most) {
		return most
	}
	return int64(h)
}

// Code is a descriptor's or a request's answer; its values are the Envoy
// API's RateLimitResponse.Code.
type Code int32

const (
	// OK admits the request.
	OK Code = 1
	// OverLimit refuses it.
	OverLimit Code = 2
)

// String returns the Envoy API's name of the code.
func (c Code) String() string {
	switch c {
	case OK:
		return "OK"
	case OverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// Never is the RetryAfter of hits that no wait admits (more than the
// capacity, or a limit of 0).
const Never = time.Duration(math.MaxInt64)

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
	// RetryAfter is, when Over, how long until the hits could be admitted;
	// Never when no wait admits them; 0 when not Over.
	RetryAfter time.Duration
	// Metric increments, as envoyproxy/ratelimit counts them: hits within
	// the limit, near it (above NearLimitRatio of it), over it, and over it
	// but let through by shadow mode.
	WithinHits, NearHits, OverHits, ShadowHits uint64
}

// Decide turns the results of Ops, run at now, into the descriptor's
// status. It returns an error only when results do not answer Ops (a
// misbehaving executor). NoLimit and Unlimited items take nil results.
func (it *Item) Decide(results []wire.Result, now time.Time) (Status, error) {
	switch it.Kind {
	case NoLimit:
		return Status{Code: OK}, nil
	case Unlimited:
		return Status{Code: OK, Remaining: math.MaxUint32}, nil
	}
	if want := it.opCount(); len(results) != want {
		return Status{}, fmt.Errorf("rlsconfig: %d results for %d operations", len(results), want)
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
			s.Code = OK
		case it.Rule.QuotaMode:
			s.Code = OK
		}
	}
	if !s.Over || !it.Rule.ShadowMode {
		s.ShadowHits = 0
	}
	return s, nil
}

func (it *Item) decideWindow(res []wire.Result, now time.Time) Status {
	n := uint64(it.Rule.RequestsPerUnit)
	h := it.Hits
	unit := it.Rule.Unit.Seconds()
	reset := time.Duration(unit-now.Unix()%unit) * time.Second
	var before, after uint64
	var over bool
	if h == 0 {
		t := res[0].Tokens
		over = t < 1
		after = n + 1 - uint64(max(t, 0))
		before = after
	} else {
		took, t := res[0].Tokens, res[1].Tokens
		over = t < 1 || took < clampHits(h, int64(n)+1)
		if over {
			before = n + 1 - uint64(max(took, 0)) // took 0: over before
			after = before + h
		} else {
			after = n + 1 - uint64(t)
			before = after - h
		}
	}
	s := Status{Code: OK, Over: over, ResetAfter: reset}
	if over {
		s.Code = OverLimit
		s.RetryAfter = reset
		if h > n {
			s.RetryAfter = Never
		}
	} else {
		s.Remaining = uint32(n - after)
	}
	s.count(n, before, after, h, it.nearRatio)
	return s
}

func (it *Item) decideBucket(res []wire.Result) Status {
	c := uint64(it.Rule.Capacity())
	h := it.Hits
	if it.Rule.RequestsPerUnit == 0 {
		s := Status{Code: OverLimit, Over: true, RetryAfter: Never}
		s.count(0, 0, h, h, 0)
		return s
	}
	var s Status
	var avail uint64
	if h == 0 {
		avail = uint64(max(res[0].Tokens, 0))
		s = Status{Over: !res[0].OK, ResetAfter: time.Duration(res[1].Wait), RetryAfter: time.Duration(res[0].Wait)}
		if !s.Over {
			s.Remaining = uint32(min(avail, math.MaxUint32))
		}
	} else {
		r := res[0]
		avail = uint64(max(r.Tokens, 0))
		s = Status{Over: !r.OK, ResetAfter: time.Duration(r.Reset)}
		if r.OK {
			s.Remaining = uint32(min(avail, math.MaxUint32))
			avail += h
		} else {
			s.RetryAfter = time.Duration(r.Wait)
		}
	}
	s.Code = OK
	if s.Over {
		s.Code = OverLimit
	} else {
		s.RetryAfter = 0
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
		s.WithinHits = h
		if after > near {
			if before >= near {
				s.NearHits = h
			} else {
				s.NearHits = after - near
			}
		}
		return
	}
	if before >= n {
		s.OverHits, s.ShadowHits = h, h
		return
	}
	s.OverHits, s.ShadowHits = after-n, after-n
	s.NearHits = n - max(near, before)
}

// Overall combines the descriptors' statuses into the request's code:
// OverLimit when any descriptor's Code is; with globalShadow (the
// service-wide shadow mode) always OK, shadowed reporting that it turned an
// OverLimit into OK.
func Overall(statuses []Status, globalShadow bool) (code Code, shadowed bool) {
	code = OK
	for i := range statuses {
		if statuses[i].Code == OverLimit {
			code = OverLimit
		}
	}
	if code == OverLimit && globalShadow {
		return OK, true
	}
	return code, false
}
