package clock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
)

func TestClocks(t *testing.T) {
	fake := clock.NewFake(time.Unix(100, 5))
	tests := []struct {
		name string
		c    clock.Clock
		wall bool
		// unix reports whether Now must be within a minute of time.Now.
		unix bool
	}{
		{"Monotonic", clock.Monotonic(), false, false},
		{"Wall", clock.Wall(), true, true},
		{"WallMillis", clock.WallMillis(), true, true},
		{"Func", clock.Func(func() int64 { return 42 }, false), false, false},
		{"Fake", fake, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.Wall(); got != tt.wall {
				t.Fatalf("Wall() = %v, want %v", got, tt.wall)
			}
			a, b := tt.c.Now(), tt.c.Now()
			if b < a {
				t.Fatalf("Now went backward: %d then %d", a, b)
			}
			if tt.unix {
				if d := time.Duration(time.Now().UnixNano() - a); d < -time.Minute || d > time.Minute {
					t.Fatalf("Now() = %d is %v away from Unix time", a, d)
				}
			}
		})
	}
	if got := clock.Func(func() int64 { return 42 }, true).Now(); got != 42 {
		t.Fatalf("Func clock Now() = %d, want 42", got)
	}
	if got := fake.Now(); got != 100e9+5 {
		t.Fatalf("fake Now() = %d, want %d", got, int64(100e9+5))
	}
}

func TestWallMillisTruncates(t *testing.T) {
	for range 100 {
		if n := clock.WallMillis().Now(); n%int64(time.Millisecond) != 0 {
			t.Fatalf("WallMillis().Now() = %d, not a whole millisecond", n)
		}
	}
}

func TestMonotonicIsComparable(t *testing.T) {
	if clock.Monotonic() != clock.Monotonic() || clock.Wall() != clock.Wall() {
		t.Fatal("constructors must return equal values, so callers can detect the default")
	}
	if clock.Monotonic() == clock.Wall() {
		t.Fatal("Monotonic() == Wall()")
	}
}

func TestFake(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	c := clock.NewFake(start)
	steps := []struct {
		name string
		do   func()
		want time.Time
	}{
		{"Advance", func() { c.Advance(time.Second) }, start.Add(time.Second)},
		{"Advance backward", func() { c.Advance(-2 * time.Second) }, start.Add(-time.Second)},
		{"Set", func() { c.Set(start) }, start},
		{"Sleep", func() { mustSleep(t, c, time.Minute) }, start.Add(time.Minute)},
		{"Sleep negative", func() { mustSleep(t, c, -time.Hour) }, start.Add(time.Minute)},
	}
	for _, s := range steps {
		s.do()
		if got := c.Now(); got != s.want.UnixNano() {
			t.Fatalf("after %s: Now() = %d, want %d", s.name, got, s.want.UnixNano())
		}
	}
	var zero clock.Fake
	if zero.Now() != 0 || !zero.Wall() {
		t.Fatalf("zero Fake: Now() = %d, Wall() = %v; want the Unix epoch on a wall clock", zero.Now(), zero.Wall())
	}
}

func mustSleep(t *testing.T, c clock.Clock, d time.Duration) {
	t.Helper()
	if err := clock.Sleep(context.Background(), c, d); err != nil {
		t.Fatalf("Sleep(%v) = %v", d, err)
	}
}

func TestSleepDoneContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fake := clock.NewFake(time.Unix(0, 0))
	for _, c := range []clock.Clock{fake, clock.Monotonic(), clock.Wall()} {
		for _, d := range []time.Duration{-1, 0, time.Nanosecond, time.Hour} {
			if err := clock.Sleep(ctx, c, d); !errors.Is(err, context.Canceled) {
				t.Fatalf("Sleep(done ctx, %T, %v) = %v, want context.Canceled", c, d, err)
			}
		}
	}
	if fake.Now() != 0 {
		t.Fatalf("a fake clock advanced to %d under a done context", fake.Now())
	}
}

func TestSleepTimer(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 0, time.Millisecond} {
		if err := clock.Sleep(context.Background(), clock.Monotonic(), d); err != nil {
			t.Fatalf("Sleep(%v) = %v", d, err)
		}
	}
}

func TestSleepInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- clock.Sleep(ctx, clock.Wall(), time.Hour) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Sleep = %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Sleep did not return after its context was cancelled")
	}
}

func TestFakeAfter(t *testing.T) {
	c := clock.NewFake(time.Unix(100, 0))
	fired := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	ch, _ := clock.After(c, time.Second)
	stopped, stop := clock.After(c, time.Second)
	stop()
	if n := c.Timers(); n != 1 {
		t.Fatalf("Timers() = %d after one stopped, want 1", n)
	}
	c.Advance(time.Second - 1)
	if fired(ch) {
		t.Fatal("fired before its time")
	}
	c.Advance(1)
	if !fired(ch) {
		t.Fatal("not fired at its time")
	}
	if fired(stopped) {
		t.Fatal("a stopped timer fired")
	}
	if n := c.Timers(); n != 0 {
		t.Fatalf("Timers() = %d after firing, want 0", n)
	}
	now, _ := clock.After(c, 0)
	if !fired(now) {
		t.Fatal("After(0) did not fire at once")
	}
	wall, _ := clock.After(clock.Wall(), time.Millisecond)
	<-wall
}

// BenchmarkNow compares a reading of Monotonic, the local buckets' default
// clock, with time.Now, which reads the wall clock as well.
func BenchmarkNow(b *testing.B) {
	var sink int64
	b.Run("Monotonic", func(b *testing.B) {
		c := clock.Monotonic()
		for b.Loop() {
			sink += c.Now()
		}
	})
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			sink += time.Now().UnixNano()
		}
	})
	if sink == 42 {
		b.Log(sink)
	}
}
