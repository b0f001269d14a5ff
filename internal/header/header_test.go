package header

import (
	"math"
	"testing"
	"time"
)

// TestRounding: a client told to wait never comes back early, and a wait
// no refill ends is never written as a number of seconds.
func TestRounding(t *testing.T) {
	for _, tc := range []struct {
		d             time.Duration
		secs, retry   int64
		retryAdmitted bool
	}{
		{0, 0, 1, true},
		{-time.Second, 0, 1, true},
		{time.Nanosecond, 1, 1, true},
		{time.Second, 1, 1, true},
		{time.Second + 1, 2, 2, true},
		{math.MaxInt64, -1, 0, false},
	} {
		if got := Seconds(tc.d); got != tc.secs {
			t.Errorf("Seconds(%v) = %d, want %d", tc.d, got, tc.secs)
		}
		if got, ok := RetryAfter(tc.d); got != tc.retry || ok != tc.retryAdmitted {
			t.Errorf("RetryAfter(%v) = %d %v, want %d %v", tc.d, got, ok, tc.retry, tc.retryAdmitted)
		}
	}
}

// TestAppend: the IETF fields list every quota; the single-valued fields
// describe the refusing one; any field type of a name and a value will do.
func TestAppend(t *testing.T) {
	type field struct{ Name, Value string }
	qs := []Quota{{Name: "a", Limit: 10, Window: 60, Remaining: 3, Reset: 20, Full: 42},
		{Name: `b"`, Limit: 5, Window: 1, Remaining: 0, Reset: -1, Full: 1, Over: true}}
	got := Append([]field(nil), qs, IETF|XRateLimit)
	want := []field{{"ratelimit-policy", `"a";q=10;w=60, "b\"";q=5;w=1`}, {"ratelimit", `"a";r=3;t=20, "b\"";r=0`},
		{"x-ratelimit-limit", "5"}, {"x-ratelimit-remaining", "0"}, {"x-ratelimit-reset", "1"}}
	if len(got) != len(want) {
		t.Fatalf("%q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("field %d: %q, want %q", i, got[i], want[i])
		}
	}
	if got := Append([]field(nil), nil, IETF|Draft); len(got) != 0 {
		t.Errorf("no quota: %q", got)
	}
}
