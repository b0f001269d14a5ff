package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
)

// TestExpiredKeysAreReleased: keys written once with a TTL and never read
// again leave the store's memory once they expired and an operation on
// another key runs a sweep later, and the map that held them is rebuilt.
func TestExpiredKeysAreReleased(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	s := New(WithClock(clk))
	const n = 10_000
	for i := range n {
		if ok, err := s.Insert(ctx, fmt.Sprintf("flood-%d", i), []byte("x"), time.Minute); !ok || err != nil {
			t.Fatalf("insert %d: %v, %v", i, ok, err)
		}
	}
	if ok, err := s.Insert(ctx, "kept", []byte("y"), 0); !ok || err != nil {
		t.Fatalf("insert kept: %v, %v", ok, err)
	}
	clk.Advance(time.Minute + sweepEvery)
	if _, _, found, err := s.Get(ctx, "kept"); !found || err != nil {
		t.Fatalf("the key without expiry: found %v, %v", found, err)
	}
	s.mu.Lock()
	held, peak := len(s.entries), s.peak
	s.mu.Unlock()
	if held != 1 || peak != 1 {
		t.Fatalf("after the flood expired, the map holds %d entries (rebuilt at %d); want 1, 1", held, peak)
	}
}
