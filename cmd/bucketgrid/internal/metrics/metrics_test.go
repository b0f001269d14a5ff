package metrics

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bucketgrid/bucketgrid/policy"
)

func TestRuleLabel(t *testing.T) {
	m := New(2)
	long := "d.x" + strings.Repeat("é", maxLabelBytes) // two bytes a rune: byte 256 is mid-rune
	for _, tc := range []struct {
		name string
		r    Rule
		want string
	}{
		{"configuration key", Rule{Key: "d.k_v", Path: "d.k_v"}, "d.k_v"},
		{"first valued key", Rule{Key: "d.k_1", Path: "d.k", Valued: true}, "d.k_1"},
		{"second valued key", Rule{Key: "d.k_2", Path: "d.k", Valued: true}, "d.k_2"},
		{"a known valued key again", Rule{Key: "d.k_1", Path: "d.k", Valued: true}, "d.k_1"},
		{"beyond the bound: the recent win", Rule{Key: "d.k_3", Path: "d.k", Valued: true}, "d.k_3"},
		{"a client's invalid UTF-8", Rule{Key: "d.k_\xff\xfe", Path: "d.k", Valued: true}, "d.k_\uFFFD"},
		{"configuration keys are not bounded", Rule{Key: "d.other", Path: "d.other"}, "d.other"},
	} {
		if got := m.RuleLabel(&tc.r); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := New(0).RuleLabel(&Rule{Key: "d.k_1", Path: "d.k", Valued: true}); got != "d.k.__other" {
		t.Errorf("a bound of 0: %q, want d.k.__other", got)
	}
	// Counting a client's invalid UTF-8 does not panic (Prometheus refuses it).
	m.Descriptor(&Rule{Key: "d.k_\xff", Path: "d.k", Valued: true}, &policy.Status{}, 1)
	got := m.RuleLabel(&Rule{Key: long, Path: "d"})
	if len(got) > maxLabelBytes || !utf8.ValidString(got) || !strings.HasPrefix(long, got) {
		t.Fatalf("long key cut to %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	// a nil *Metrics records nothing and does not panic
	var none *Metrics
	none.Descriptor(&Rule{}, &policy.Status{}, 1)
	none.Request("d", "grpc", "OK", "", 0)
	none.GlobalShadow()
	none.ConfigLoad(true)
}
