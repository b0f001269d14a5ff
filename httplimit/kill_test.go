package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// killedStore is a memstore that is broken for one key only: its Get
// panics, hangs until the context ends, or reads corrupt bytes.
type killedStore struct {
	cas.Store // the base SPI only: memstore's Writer and Batcher would bypass the overrides
	key, mode string
}

func (s killedStore) Get(ctx context.Context, k string) ([]byte, cas.Version, bool, error) {
	if k == s.key {
		switch s.mode {
		case "panic":
			panic("killedStore: " + k)
		case "hang":
			<-ctx.Done()
			return nil, 0, false, ctx.Err()
		case "corrupt":
			_, ver, _, err := s.Store.Get(ctx, k)
			return []byte("\x01Bcorrupt"), ver, true, err
		}
	}
	return s.Store.Get(ctx, k)
}

// TestOneKeyKilled kills the store for one key while four other clients are
// limited exactly, concurrently, through a real server. The killed key gets
// what its failure calls for and nothing else: a panic is never served, a
// hang gets the configured failure mode, corrupt reads under WithRecoveryFail
// are refused, a corrupt record under the default recovery is replaced and
// then limited exactly.
func TestOneKeyKilled(t *testing.T) {
	// The timeout is generous so that healthy clients are decided under any
	// load; only the hanging key waits it out (two rounds of two).
	const capacity, perClient, clients, killedRequests, timeout = 3, 6, 4, 4, time.Second
	cfg := config(t, core.Intervally(capacity, capacity, time.Hour))
	tests := []struct {
		name     string
		mode     string
		recovery bucketgrid.ManagerOption // nil: the default, re-creating
		failOpen bool
		plant    bool // a corrupt record stored once, the store healthy
		want     map[int]int
	}{
		{"panic", "panic", nil, true, false, map[int]int{0: killedRequests}},
		{"hang, fail-open", "hang", nil, true, false, map[int]int{200: killedRequests}},
		{"hang, fail-closed", "hang", nil, false, false, map[int]int{503: killedRequests}},
		{"corrupt reads, RecoveryFail", "corrupt", bucketgrid.WithRecoveryFail(), true, false, map[int]int{503: killedRequests}},
		{"corrupt record, RecoveryReconstruct", "", nil, true, true,
			map[int]int{200: capacity, 429: killedRequests - capacity}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			mem := memstore.New(memstore.WithClock(clk))
			if tt.plant {
				if ok, err := mem.Insert(context.Background(), "killed", []byte("\x01Bcorrupt"), 0); !ok || err != nil {
					t.Fatal(ok, err)
				}
			}
			opts := []bucketgrid.ManagerOption{quiet}
			if tt.recovery != nil {
				opts = append(opts, tt.recovery)
			}
			m := bucketgrid.NewManager(cas.New(killedStore{mem, "killed", tt.mode}, cas.WithClock(clk)), opts...)
			var hook hookErrs
			mw := New(NewManaged(m, StaticPlan(cfg), WithClock(clk)), WithKey(rawKey),
				WithFailOpen(tt.failOpen), WithTimeout(timeout), WithErrorHook(hook.hook))
			var servedKilled atomic.Int64
			srv := serve(t, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Key") == "killed" {
					servedKilled.Add(1)
				}
			})))

			var mu sync.Mutex
			codes := map[string]map[int]int{}
			record := func(key string, code int) {
				mu.Lock()
				defer mu.Unlock()
				if codes[key] == nil {
					codes[key] = map[int]int{}
				}
				codes[key][code]++
			}
			var wg sync.WaitGroup
			for c := range clients {
				wg.Go(func() {
					key := fmt.Sprintf("client-%d", c)
					for range perClient {
						record(key, fetch(t, srv, key))
					}
				})
			}
			for range 2 {
				wg.Go(func() {
					for range killedRequests / 2 {
						record("killed", fetch(t, srv, "killed"))
					}
				})
			}
			wg.Wait()

			for c := range clients {
				key := fmt.Sprintf("client-%d", c)
				if got := codes[key]; got[200] != capacity || got[429] != perClient-capacity || len(got) != 2 {
					t.Errorf("%s: statuses %v, want %d × 200 and %d × 429", key, got, capacity, perClient-capacity)
				}
			}
			if got := codes["killed"]; fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("killed key: statuses %v, want %v", got, tt.want)
			}
			if want := int64(tt.want[200]); servedKilled.Load() != want {
				t.Errorf("killed key served %d times, want %d", servedKilled.Load(), want)
			}
			s := mw.Stats()
			switch tt.name {
			case "panic":
				if s.Panicked != killedRequests || s.FailedOpen != 0 {
					t.Errorf("stats %+v", s)
				}
			case "hang, fail-open":
				if s.FailedOpen != killedRequests {
					t.Errorf("stats %+v: the hang must be counted as failing open", s)
				}
			case "corrupt record, RecoveryReconstruct":
				// Each of the two goroutines on the key may meet the
				// record before the other's new bucket replaced it, and
				// each such request counts (Stats): 1 or 2, seen 2
				// beside 8 busy loops. That one bucket replaced it is
				// what the statuses above judge (capacity × 200).
				if n := m.Stats().CorruptReplaced; n < 1 || n > 2 || s.FailedOpen != 0 {
					t.Errorf("CorruptReplaced %d (want 1, or 2 when both goroutines met the record), stats %+v", n, s)
				}
			}
		})
	}
}
