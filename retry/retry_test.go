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
	s := Backoff(BackoffConfig{Base: time.Millisecond, Cap: 8 * time.Millisecond, Budget: 20 * time.Millisecond, Rand: maxRand})
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
		{2, 20 * time.Millisecond, 0, true},                      // budget spent
		{2, 25 * time.Millisecond, 0, true},
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
