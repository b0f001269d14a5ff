package retry

import (
	"testing"
	"time"
)

func TestImmediate(t *testing.T) {
	s := Immediate(3)
	for attempt, want := range map[int]Action{1: RetryNow, 2: RetryNow, 3: Stop, 4: Stop} {
		if got := s.Next(Metadata{Attempt: attempt}).Action; got != want {
			t.Errorf("attempt %d: %v, want %v", attempt, got, want)
		}
	}
}

func TestBackoffGrowsCapsAndRespectsBudget(t *testing.T) {
	maxRand := func(n int64) int64 { return n - 1 } // the top of the jitter range
	s := Backoff(BackoffConfig{Base: time.Millisecond, Cap: 8 * time.Millisecond, Budget: 20 * time.Millisecond, MinAttempts: 3, Rand: maxRand})
	tests := []struct {
		attempt   int
		elapsed   time.Duration
		wantDelay time.Duration
		wantStop  bool
	}{
		{1, 0, time.Millisecond, false},
		{2, 0, 2 * time.Millisecond, false},
		{3, 0, 4 * time.Millisecond, false},
		{4, 0, 8 * time.Millisecond, false},
		{10, 0, 8 * time.Millisecond, false},                     // capped
		{10, 17 * time.Millisecond, 3 * time.Millisecond, false}, // bounded by what is left
		{3, 20 * time.Millisecond, 0, true},                      // budget spent
		{3, 25 * time.Millisecond, 0, true},
		{1, 25 * time.Millisecond, time.Millisecond, false}, // budget spent, under the floor of attempts
		{2, time.Second, 2 * time.Millisecond, false},
	}
	for _, tt := range tests {
		d := s.Next(Metadata{Attempt: tt.attempt, Start: 100, Now: 100 + int64(tt.elapsed)})
		if tt.wantStop {
			if d.Action != Stop {
				t.Errorf("attempt %d after %v: %+v, want Stop", tt.attempt, tt.elapsed, d)
			}
			continue
		}
		if d.Action != RetryAfter || d.Delay != tt.wantDelay {
			t.Errorf("attempt %d after %v: %+v, want RetryAfter %v", tt.attempt, tt.elapsed, d, tt.wantDelay)
		}
	}
}

func TestBackoffJitterIsFull(t *testing.T) {
	s := Backoff(BackoffConfig{Base: time.Millisecond, Cap: time.Millisecond, Budget: time.Second})
	var lo, hi bool
	for i := 0; i < 1000; i++ {
		d := s.Next(Metadata{Attempt: 5}).Delay
		if d < 0 || d > time.Millisecond {
			t.Fatalf("delay %v outside [0, 1ms]", d)
		}
		lo = lo || d < 250*time.Microsecond
		hi = hi || d > 750*time.Microsecond
	}
	if !lo || !hi {
		t.Fatalf("jitter does not span the range (low seen %v, high seen %v)", lo, hi)
	}
}

// TestDefaultBackoffOutlastsAStarvedProcess: on a loaded host a process may
// wait longer than the whole budget for a CPU between two attempts; the
// default still makes its floor of attempts before giving up.
func TestDefaultBackoffOutlastsAStarvedProcess(t *testing.T) {
	s := Default()
	min := DefaultBackoffConfig().MinAttempts
	if min < 2 {
		t.Fatalf("default MinAttempts %d: the budget alone decides", min)
	}
	starved := int64(600 * time.Millisecond) // more than the 500 ms budget, after one lost race
	for attempt := 1; attempt < min; attempt++ {
		if d := s.Next(Metadata{Attempt: attempt, Start: 0, Now: starved * int64(attempt)}); d.Action == Stop {
			t.Fatalf("stopped after %d lost races; want at least %d attempts", attempt, min)
		}
	}
	if d := s.Next(Metadata{Attempt: min, Start: 0, Now: starved}); d.Action != Stop {
		t.Fatalf("after %d attempts past the budget: %+v, want Stop", min, d)
	}
}
