package policy

import (
	"strings"
	"testing"
)

func TestUnits(t *testing.T) {
	for _, tc := range []struct {
		name string
		unit Unit
		secs int64
	}{{"second", unitSecond, 1}, {"MINUTE", unitMinute, 60}, {"Hour", unitHour, 3600}, {"day", unitDay, 86400},
		{"week", unitWeek, 604800}, {"month", unitMonth, 2592000}, {"year", unitYear, 31536000}} {
		u, ok := parseUnit(tc.name)
		if !ok || u != tc.unit || u.seconds() != tc.secs || !strings.EqualFold(u.String(), tc.name) {
			t.Errorf("%s: %v %v %d %q", tc.name, u, ok, u.seconds(), u.String())
		}
	}
	if _, ok := parseUnit("unknown"); ok {
		t.Error("unknown parsed")
	}
	if unitUnknown.seconds() != 0 || unitUnknown.String() != "UNKNOWN" {
		t.Error("unitUnknown")
	}
	for _, a := range []Algorithm{FixedWindow, TokenBucket} {
		if b, ok := ParseAlgorithm(a.String()); !ok || b != a {
			t.Errorf("%v does not round-trip", a)
		}
	}
}
