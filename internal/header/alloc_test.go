package header

import "testing"

type field struct{ Name, Value string }

// TestAppendIETFAllocations: the two IETF values share one string, and the
// fields one slice.
func TestAppendIETFAllocations(t *testing.T) {
	qs := []Quota{{Name: "a", Limit: 10, Window: 60, Remaining: 4, Reset: 30}}
	var got []field
	if n := testing.AllocsPerRun(100, func() { got = Append([]field(nil), qs, IETF) }); n > 2 {
		t.Errorf("%v allocations, want at most 2 (the values, the fields)", n)
	}
	want := []field{{"ratelimit-policy", `"a";q=10;w=60`}, {"ratelimit", `"a";r=4;t=30`}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("fields %q, want %q", got, want)
	}
}
