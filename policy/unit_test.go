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
	}{{"second", Second, 1}, {"MINUTE", Minute, 60}, {"Hour", Hour, 3600}, {"day", Day, 86400},
		{"week", Week, 604800}, {"month", Month, 2592000}, {"year", Year, 31536000}} {
		u, ok := ParseUnit(tc.name)
		if !ok || u != tc.unit || u.Seconds() != tc.secs || !strings.EqualFold(u.String(), tc.name) {
			t.Errorf("%s: %v %v %d %q", tc.name, u, ok, u.Seconds(), u.String())
		}
	}
	if _, ok := ParseUnit("unknown"); ok {
		t.Error("unknown parsed")
	}
	if UnitUnknown.Seconds() != 0 || UnitUnknown.String() != "UNKNOWN" {
		t.Error("UnitUnknown")
	}
	for _, a := range []Algorithm{FixedWindow, TokenBucket} {
		if b, ok := ParseAlgorithm(a.String()); !ok || b != a {
			t.Errorf("%v does not round-trip", a)
		}
	}
}
