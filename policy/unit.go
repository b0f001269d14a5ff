package policy

import (
	"strconv"
	"strings"
	"time"
)

// Unit is the time unit of a limit. Its values are those of the Envoy API's
// RateLimitResponse.RateLimit.Unit, so a conversion to the protobuf enum is a
// plain cast. The zero value is UnitUnknown, which no limit has.
type Unit int32

// The units of envoyproxy/ratelimit. A month is 30 days and a year 365 days,
// and every window is aligned to the Unix epoch, as there.
const (
	UnitUnknown Unit = 0
	Second      Unit = 1
	Minute      Unit = 2
	Hour        Unit = 3
	Day         Unit = 4
	Month       Unit = 5
	Year        Unit = 6
	Week        Unit = 7
)

// unitNames are the units' names in the Envoy API, by Unit.
var unitNames = [...]string{UnitUnknown: "UNKNOWN", Second: "SECOND", Minute: "MINUTE", Hour: "HOUR", Day: "DAY",
	Month: "MONTH", Year: "YEAR", Week: "WEEK"}

// ParseUnit returns the unit named s, in any letter case ("minute",
// "MINUTE"), and false when s names none.
func ParseUnit(s string) (Unit, bool) {
	for u := Second; int(u) < len(unitNames); u++ {
		if strings.EqualFold(s, unitNames[u]) {
			return u, true
		}
	}
	return UnitUnknown, false
}

// String returns the unit's name in the Envoy API ("MINUTE"), or "UNKNOWN".
func (u Unit) String() string {
	if u < 0 || int(u) >= len(unitNames) {
		return "UNKNOWN"
	}
	return unitNames[u]
}

// Seconds returns the length of the unit in seconds, 0 for an unknown unit.
func (u Unit) Seconds() int64 {
	switch u {
	case Second:
		return 1
	case Minute:
		return 60
	case Hour:
		return 3600
	case Day:
		return 86400
	case Week:
		return 7 * 86400
	case Month:
		return 30 * 86400
	case Year:
		return 365 * 86400
	}
	return 0
}

// Duration returns the length of the unit, 0 for an unknown unit.
func (u Unit) Duration() time.Duration { return time.Duration(u.Seconds()) * time.Second }

// Algorithm is how a limit counts requests.
type Algorithm uint8

const (
	// FixedWindow counts the hits of each window of one unit, aligned to the
	// Unix epoch, and refuses once the count exceeds requests_per_unit: the
	// decisions of envoyproxy/ratelimit, request for request. A window
	// boundary may admit up to twice the limit in a short span.
	FixedWindow Algorithm = iota
	// TokenBucket is a bucket of burst tokens (requests_per_unit when burst
	// is not set) refilled greedily at requests_per_unit per unit: the limit
	// holds over every span of time, not just within aligned windows.
	TokenBucket
)

// ParseAlgorithm returns the algorithm named s ("fixed_window" or
// "token_bucket") and false when s names none.
func ParseAlgorithm(s string) (Algorithm, bool) {
	switch s {
	case "fixed_window":
		return FixedWindow, true
	case "token_bucket":
		return TokenBucket, true
	}
	return 0, false
}

// String returns the algorithm's configuration name.
func (a Algorithm) String() string {
	switch a {
	case FixedWindow:
		return "fixed_window"
	case TokenBucket:
		return "token_bucket"
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}
