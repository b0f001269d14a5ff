package bucketgrid_test

import (
	"errors"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// TestTryConsumeAt drives a Local by explicit readings of its clock, as
// x/time/rate's AllowN takes its t: the bucket's own clock never moves, and
// a reading earlier than the last refills nothing.
func TestTryConsumeAt(t *testing.T) {
	cfg, err := core.NewConfig(core.Greedy(10, 10, time.Second)) // a token every 100 ms
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	var cl bucketgrid.CountingListener
	l, err := bucketgrid.NewLocal(cfg, bucketgrid.WithClock(clk), bucketgrid.WithListener(&cl))
	if err != nil {
		t.Fatal(err)
	}
	t0 := clk.Now()
	ms := int64(time.Millisecond)
	steps := []struct {
		n, at int64
		ok    bool
	}{
		{10, t0, true},
		{1, t0, false},
		{1, t0 + 100*ms, true},  // one token refilled
		{1, t0 + 150*ms, false}, // half a token
		{1, t0, false},          // back in time: nothing refilled, nothing undone
		{6, t0 + 650*ms, false}, // 5.5 tokens by then (6.5 had t0 moved the refill back)
		{5, t0 + 650*ms, true},
	}
	for i, s := range steps {
		if ok, err := l.TryConsumeAt(s.n, s.at); ok != s.ok || err != nil {
			t.Fatalf("step %d: TryConsumeAt(%d, t0+%v) = %v, %v; want %v", i, s.n, time.Duration(s.at-t0), ok, err, s.ok)
		}
	}
	if clk.Now() != t0 || cl.Consumed() != 16 || cl.Rejected() != 9 {
		t.Fatalf("clock +%v, consumed %d, rejected %d; want the clock untouched, 16 tokens consumed, 9 rejected",
			time.Duration(clk.Now()-t0), cl.Consumed(), cl.Rejected())
	}
	if _, err := l.TryConsumeAt(0, t0); !errors.Is(err, bucketgrid.ErrTokens) {
		t.Fatalf("TryConsumeAt(0) = %v, want ErrTokens", err)
	}
}
