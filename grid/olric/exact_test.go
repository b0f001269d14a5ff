package olric

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

func consumeReq(cfg *core.Config, n int64) wire.Request {
	return wire.Request{Mode: wire.ModeCreateIfAbsent, Config: cfg, Ops: []wire.Op{{Kind: wire.OpTryConsume, Tokens: n}}}
}

func availableReq(cfg *core.Config) wire.Request {
	return wire.Request{Mode: wire.ModeCreateIfAbsent, Config: cfg, Ops: []wire.Op{{Kind: wire.OpAvailableTokens}}}
}

func TestExactAccounting(t *testing.T) {
	ms := startCluster(t, 3, nil)
	// 8 goroutines x 1000 TryConsume(1), spread over the members: capacity
	// 9000 leaves exactly 1000, capacity 2000 admits exactly 2000.
	for _, tc := range []struct {
		key            string
		capacity, want int64
	}{{"roomy", 9000, 8000}, {"tight", 2000, 2000}} {
		key := tc.key
		cfg, err := core.NewConfig(core.Intervally(tc.capacity, tc.capacity, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var ok atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			m := ms[g%len(ms)]
			wg.Go(func() {
				for range 1000 {
					resp, err := m.Execute(context.Background(), key, consumeReq(&cfg, 1))
					if err != nil {
						t.Error(err)
						return
					}
					if resp.Results[0].OK {
						ok.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if ok.Load() != tc.want {
			t.Fatalf("%s: %d consumed, want %d", key, ok.Load(), tc.want)
		}
		for _, m := range ms {
			resp, err := m.Execute(context.Background(), key, availableReq(&cfg))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Results[0].Tokens; got != tc.capacity-tc.want {
				t.Fatalf("%s via %s: %d left, want %d", key, m.Name(), got, tc.capacity-tc.want)
			}
		}
	}
}

// testBucket is a bucket of the given capacity refilled once an hour.
func testBucket(capacity int64) core.Config {
	cfg, err := core.NewConfig(core.Intervally(capacity, capacity, time.Hour))
	if err != nil {
		panic(err)
	}
	return cfg
}
