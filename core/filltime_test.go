package core

import (
	"math"
	"testing"
	"time"
)

func TestFillTime(t *testing.T) {
	tests := []struct {
		bw   Bandwidth
		want int64
	}{
		{Greedy(100, 100, time.Minute), int64(time.Minute)},
		{Greedy(10, 3, time.Second), 3333333334}, // ceil(10/3 s)
		{Intervally(10, 3, time.Second), 4 * int64(time.Second)},
		{Intervally(10, 10, time.Hour), int64(time.Hour)},
		{Greedy(math.MaxInt64, 1, time.Hour), math.MaxInt64},
	}
	for _, tt := range tests {
		if got := tt.bw.FillTime(); got != tt.want {
			t.Errorf("%v %d/%d per %v: FillTime = %d, want %d", tt.bw.Style, tt.bw.Capacity, tt.bw.RefillTokens, tt.bw.RefillPeriod, got, tt.want)
		}
		// it is the wait of an empty bucket for a full one
		if tt.want == math.MaxInt64 {
			continue
		}
		b := NewState(Config{Bandwidths: []Bandwidth{tt.bw.WithInitialTokens(0)}}, 0)
		if full := b.TimeToFull(0); full != tt.want {
			t.Errorf("TimeToFull of an empty bucket %d, FillTime %d", full, tt.want)
		}
	}
}
