package wasmfilter_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/wasmfilter"
)

// metric returns a counter of the default stat prefix as /stats shows it.
func (e *envoy) metric(policy, event string) uint64 {
	e.t.Helper()
	v, ok := e.stats.Value("bucketgrid.policy." + policy + "." + event)
	if !ok {
		e.t.Fatalf("no metric %s.%s; have %v", policy, event, e.stats.Names())
	}
	return v
}

func (e *envoy) worker(config string) *worker {
	e.t.Helper()
	w, ok := e.newWorker(config)
	if !ok {
		e.t.Fatalf("configuration refused: %q", w.logs)
	}
	return w
}

// TestWasmMetrics: two workers count into the same counters, named as
// Envoy's /stats shows them.
func TestWasmMetrics(t *testing.T) {
	e := newEnvoy(t)
	cfg := wasmfilter.PerAddress(`{"unit": "hour", "requests_per_unit": 3}`, "")
	w1, w2 := e.worker(cfg), e.worker(cfg)
	for i := range 5 {
		[]*worker{w1, w2}[i%2].do("192.0.2.1:1", nil)
	}
	if ok, over := e.metric("rules", "ok"), e.metric("rules", "over_limit"); ok != 3 || over != 2 {
		t.Fatalf("ok %d over_limit %d, want 3 and 2", ok, over)
	}
	if n := len(e.stats.Names()); n != 11 {
		t.Fatalf("%d metrics: %v", n, e.stats.Names())
	}
	e.shared.Fail = func(op, key string) uint32 { return 10 }
	w1.do("192.0.2.1:1", nil)
	e.shared.Fail = nil
	if e.metric("rules", "error") != 1 || e.metric("rules", "failure_mode_allowed") != 1 {
		t.Fatal("failure not counted")
	}
	for _, l := range append(w1.logs, w2.logs...) {
		if strings.Contains(l, "192.0.2.1") {
			t.Fatalf("log line carries the key: %q", l)
		}
	}
}

// TestWasmExampleTableAtScale runs a per-client limit on /api/ (a burst of
// 10, refilled at 10 a day, so no bucket frees its slot during the test)
// through the .wasm with 4096 slots and 4096 clients
// in one hour: the table takes more than 90 % of its slots before it first
// evicts, and clients are limited at every fill level (every 16th client,
// and every client from the first eviction on, sends 11 requests: 10 are
// admitted). TestFourThousandClientsInOneHour checks every client, natively.
func TestWasmExampleTableAtScale(t *testing.T) {
	const slots, clients = 4096, 4096
	e := newEnvoy(t)
	cfg := `{"domain": "edge", "slots": 4096, "table_full": "evict_oldest",
	  "rate_limits": [{"actions": [{"header_value_match": {"descriptor_value": "api", "headers": [{"name": ":path", "prefix_match": "/api/"}]}},
	                               {"remote_address": {}}]}],
	  "rules": [{"domain": "edge", "descriptors": [{"key": "header_match", "value": "api", "descriptors": [{"key": "remote_address",
	    "rate_limit": {"unit": "day", "requests_per_unit": 10, "algorithm": "token_bucket", "burst": 10}}]}]}]}`
	workers := []*worker{e.worker(cfg), e.worker(cfg)}
	first := -1
	api := map[string]string{":path": "/api/x"}
	for c := range clients {
		e.clock.Add(int64(time.Hour) / clients)
		addr := fmt.Sprintf("10.0.%d.%d:1", c>>8, c&255)
		n, want := 1, 1
		if c%16 == 0 || first >= 0 {
			n, want = 11, 10
		}
		admitted := 0
		for i := range n {
			if workers[(c+i)%2].do(addr, api).status == 200 {
				admitted++
			}
		}
		if admitted != want {
			t.Fatalf("client %d: %d of %d admitted", c, admitted, n)
		}
		if first < 0 && e.metric("rules", "evicted") > 0 {
			first = c
		}
	}
	t.Logf("first eviction at client #%d of %d slots; %d evicted", first, slots, e.metric("rules", "evicted"))
	if first >= 0 && first < slots*9/10 {
		t.Fatalf("first eviction at client #%d: under 90 %% of %d slots", first, slots)
	}
}

// TestWasmEvictionAcrossWorkers: three workers on three goroutines share a
// table far too small for their clients, with eviction, and clients land on
// random workers. No request ever sees another client's bucket: with the
// clock frozen, a client's remaining tokens are never below its capacity
// minus its own admitted requests.
func TestWasmEvictionAcrossWorkers(t *testing.T) {
	const workers, clients, each, capacity = 3, 24, 60, 1000
	cfg := wasmfilter.KeyedConfig("client", `{"unit": "hour", "requests_per_unit": 1000}`,
		`, "max_attempts": 1000, "headers": {"x_ratelimit": true}, "slots": 8`)
	e := newEnvoy(t)
	var mu [clients]sync.Mutex
	var admitted [clients]int
	var wg sync.WaitGroup
	for v := range workers {
		w := e.worker(cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(v), 3))
			for range each {
				c := rng.IntN(clients)
				mu[c].Lock()
				r := w.do("", map[string]string{"client": strconv.Itoa(c)})
				if r.status == 200 {
					admitted[c]++
					if rem, _ := strconv.Atoi(r.headers["x-ratelimit-remaining"]); rem < capacity-admitted[c] {
						t.Errorf("client %d: %d left after %d of its own requests: another client's bucket", c, rem, admitted[c])
					}
				} else {
					t.Errorf("client %d: %d %s", c, r.status, r.details)
				}
				mu[c].Unlock()
			}
		}()
	}
	wg.Wait()
	if e.metric("rules", "evicted") == 0 {
		t.Fatal("nothing evicted: the test did not test eviction")
	}
	t.Logf("evicted %d; %d writes, %d lost compare-and-swap races", e.metric("rules", "evicted"), e.shared.Sets(), e.shared.Mismatches())
}
