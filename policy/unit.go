package policy

import (
	"strconv"
	"strings"
	"time"
)

// Unit is the time unit of a limit. Its values are those of the Envoy API's
// RateLimitResponse.RateLimit.Unit, so a conversion to the protobuf enum is a
// plain cast (SECOND is 1, MINUTE 2, HOUR 3, DAY 4, MONTH 5, YEAR 6, WEEK 7;
// a month is 30 days and a year 365 days, and every window is aligned to the
// Unix epoch, as in envoyproxy/ratelimit). The zero value, UNKNOWN, is the
// unit of an unlimited limit.
type Unit int32

// The units of envoyproxy/ratelimit, as Envoy numbers them.
const (
	unitUnknown Unit = 0
	unitSecond  Unit = 1
	unitMinute  Unit = 2
	unitHour    Unit = 3
	unitDay     Unit = 4
	unitMonth   Unit = 5
	unitYear    Unit = 6
	unitWeek    Unit = 7
)

// unitNames are the units' names in the Envoy API, by Unit.
var unitNames = [...]string{unitUnknown: "UNKNOWN", unitSecond: "SECOND", unitMinute: "MINUTE", unitHour: "HOUR", unitDay: "DAY",
	unitMonth: "MONTH", unitYear: "YEAR", unitWeek: "WEEK"}

// parseUnit returns the unit named s, in any letter case ("minute",
// "MINUTE"), and false when s names none.
func parseUnit(s string) (Unit, bool) {
	for u := unitSecond; int(u) < len(unitNames); u++ {
		if strings.EqualFold(s, unitNames[u]) {
			return u, true
		}
	}
	return unitUnknown, false
}

// String returns the unit's name in the Envoy API ("MINUTE"), or "UNKNOWN".
func (u Unit) String() string {
	if u < 0 || int(u) >= len(unitNames) {
		return "UNKNOWN"
	}
	return unitNames[u]
}

// seconds returns the length of the unit in seconds, 0 for an unknown unit.
func (u Unit) seconds() int64 {
	switch u {
	case unitSecond:
		return 1
	case unitMinute:
		return 60
	case unitHour:
		return 3600
	case unitDay:
		return 86400
	case unitWeek:
		return 7 * 86400
	case unitMonth:
		return 30 * 86400
	case unitYear:
		return 365 * 86400
	}
	return 0
}

// Duration returns the length of the unit, 0 for an unknown unit.
func (u Unit) Duration() time.Duration { return time.Duration(u.seconds()) * time.Second }

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
