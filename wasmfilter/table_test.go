package wasmfilter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// perClient limits each client (remote_address) to a burst of 10 refilled
// at 10 a day (a token bucket): a client's bucket is not full, so its slot
// stays taken, for the whole of these tests after its first request.
func perClient(slots int, tableFull string) string {
	return perAddress(`{"name": "per-client", "unit": "day", "requests_per_unit": 10, "algorithm": "token_bucket", "burst": 10}`,
		`, "slots": `+strconv.Itoa(slots)+`, "table_full": "`+tableFull+`", "headers": {"ietf": true}`)
}

func clientAddr(i int) string {
	return fmt.Sprintf("10.%d.%d.%d:4000", i>>16&255, i>>8&255, i&255)
}

// TestFourThousandClientsInOneHour is the sizing case: 4096
// slots, 4096 distinct clients arriving over one hour, each sending 11
// requests at once. Every client is limited (10 admitted, the 11th
// refused) under the default table_full, evict_oldest; under reject and
// allow, the clients that find no slot get what was configured — a 429
// carrying Retry-After, or no limit at all — and are counted. In every
// mode the table takes at least 90 % of its slots before the first
// client finds no room.
func TestFourThousandClientsInOneHour(t *testing.T) {
	const slots, clients, burst = 4096, 4096, 10
	for _, mode := range []string{"evict_oldest", "reject", "allow"} {
		t.Run(mode, func(t *testing.T) {
			env := newFakeEnvoy()
			vm := env.vm(t, perClient(slots, mode))
			firstFull := -1
			turnedAway, unlimited := 0, 0
			for c := range clients {
				env.clock.Add(int64(time.Hour) / clients)
				admitted := 0
				for i := range burst + 1 {
					r := vm.do(clientAddr(c), nil)
					switch {
					case r.status == 200:
						admitted++
					case r.status == 429 && r.details == "bucketgrid_table_full":
						if mode != "reject" || i != 0 {
							t.Fatalf("client %d request %d: table full under %s", c, i, mode)
						}
						if ra, _ := strconv.Atoi(r.headers["retry-after"]); ra < 1 || ra > 86400 {
							t.Fatalf("client %d: Retry-After %q", c, r.headers["retry-after"])
						}
					case r.status != 429 || r.details != "bucketgrid_rate_limited":
						t.Fatalf("client %d request %d: %d %s", c, i, r.status, r.details)
					}
					if r.details == "bucketgrid_table_full" {
						break
					}
				}
				full := env.metric(t, "rules", "table_full") + env.metric(t, "rules", "evicted")
				if firstFull < 0 && full > 0 {
					firstFull = c
				}
				switch {
				case admitted == burst:
				case admitted == 0 && mode == "reject":
					turnedAway++
				case admitted == burst+1 && mode == "allow":
					unlimited++
				default:
					t.Fatalf("client %d: %d of %d requests admitted under %s", c, admitted, burst+1, mode)
				}
			}
			if firstFull < 0 {
				firstFull = clients
			}
			t.Logf("%s: first client without a free slot: #%d (%.1f %% of %d slots); %d turned away, %d unlimited; evicted %d",
				mode, firstFull, 100*float64(firstFull)/slots, slots, turnedAway, unlimited, env.metric(t, "rules", "evicted"))
			if firstFull < slots*9/10 {
				t.Errorf("the table turned its first client away at %d of %d slots, want at least 90 %%", firstFull, slots)
			}
			if got := env.metric(t, "rules", "table_full_allowed"); got != uint64(unlimited*(burst+1)) {
				t.Errorf("table_full_allowed = %d, want %d", got, unlimited*(burst+1))
			}
			if mode == "evict_oldest" && env.metric(t, "rules", "table_full") != 0 {
				t.Error("table_full counted under evict_oldest")
			}
		})
	}
}

// TestTinyTableLimitsEveryClient is the 4-slot case: a fifth
// client used to send 7,000 requests, all admitted, under the default
// configuration. Now the default evicts, and the client is limited.
func TestTinyTableLimitsEveryClient(t *testing.T) {
	env := newFakeEnvoy()
	vm := env.vm(t, perClient(4, "evict_oldest"))
	for c := range 4 {
		vm.do(clientAddr(c), nil)
	}
	admitted := 0
	for range 7000 {
		if vm.do(clientAddr(4), nil).status == 200 {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("the fifth client of a 4-slot table: %d of 7000 admitted, want 10", admitted)
	}
	if env.metric(t, "rules", "evicted") != 1 {
		t.Fatalf("evicted %d, want 1", env.metric(t, "rules", "evicted"))
	}
}

// TestEvictionAcrossVMsNeverMixesClients: four VMs on four goroutines (as
// four Envoy workers) share a table far too small for their clients, with
// eviction; clients' requests land on random workers. A client's bucket may
// be evicted (it starts again full), but no request may ever see another
// client's bucket: with the clock frozen, what a client has left is never
// less than its capacity minus its own admitted requests.
func TestEvictionAcrossVMsNeverMixesClients(t *testing.T) {
	const vms, clients, perClientRequests, capacity = 4, 48, 40, 1000
	cfg := keyedConfig("client", `{"unit": "hour", "requests_per_unit": 1000}`,
		`, "max_attempts": 1000, "table_full": "evict_oldest", "slots": 16, "headers": {"x_ratelimit": true}`)
	env := newFakeEnvoy()
	var mu [clients]sync.Mutex
	var admitted [clients]int
	var wg sync.WaitGroup
	for v := range vms {
		vm := env.vm(t, cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(v), 1))
			for range clients * perClientRequests / vms {
				c := rng.IntN(clients)
				mu[c].Lock() // one request per client at a time, so its count is exact

				r := vm.do("", map[string]string{"client": "c" + strconv.Itoa(c)})
				if r.status == 200 {
					admitted[c]++
					rem, _ := strconv.Atoi(r.headers["x-ratelimit-remaining"])
					if rem < capacity-admitted[c] {
						t.Errorf("client %d saw %d left after %d admitted requests of its own: another client's bucket", c, rem, admitted[c])
					}
				}
				mu[c].Unlock()
			}
		}()
	}
	wg.Wait()
	if env.metric(t, "rules", "evicted") == 0 {
		t.Fatal("no eviction: the test did not test eviction")
	}
	t.Logf("evicted %d, cas conflicts %d", env.metric(t, "rules", "evicted"), env.metric(t, "rules", "cas_conflict"))
}

// TestStoreOwnershipUnderRacingVMs drives the store directly from four
// VMs' stores on four goroutines, over a table of 8 slots and 40 keys with
// eviction: every value a key's Get returns was written for that key.
func TestStoreOwnershipUnderRacingVMs(t *testing.T) {
	ctx := context.Background()
	f := newStoreFixture(8, true)
	var wg sync.WaitGroup
	for v := range 4 {
		s := f.vm(8, true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(v), 2))
			for i := range 3000 {
				k := "k" + strconv.Itoa(rng.IntN(40))
				data, ver, found, err := s.Get(ctx, k)
				if err != nil {
					t.Error(err)
					return
				}
				if found && !strings.HasPrefix(string(data), k+"/") {
					t.Errorf("Get(%s) returned %q", k, data)
					return
				}
				val := []byte(k + "/" + strconv.Itoa(v) + "/" + strconv.Itoa(i))
				if found {
					_, err = s.Replace(ctx, k, val, ver, time.Hour)
				} else {
					_, err = s.Insert(ctx, k, val, time.Duration(1+rng.IntN(60))*time.Minute)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// firstTurnAway inserts distinct client keys that never expire into a
// fresh table of n slots until one finds no room, and returns how many got
// in.
func firstTurnAway(tb testing.TB, n int) int {
	ctx := context.Background()
	s := newStoreFixture(uint32(n), false).store
	for c := 0; ; c++ {
		ok, err := s.Insert(ctx, "per-client\x00"+hostOf(clientAddr(c)), []byte("state"), time.Hour)
		switch {
		case errors.Is(err, ErrTableFull):
			return c
		case err != nil || !ok:
			tb.Fatalf("client %d: %v %v", c, ok, err)
		}
	}
}

// TestSizingRule: a table takes at least 90 % of its slots before the first
// new client finds none free, at every size up to 16384 (the README's
// table, up to MaxSlots, comes from BenchmarkFirstTurnAway).
func TestSizingRule(t *testing.T) {
	for _, n := range []int{1, 8, 64, 256, 1024, 4096, 16384} {
		got := firstTurnAway(t, n)
		t.Logf("%6d slots: first turn-away at client %6d (%.1f %%)", n, got, 100*float64(got)/float64(n))
		if got < n*9/10 {
			t.Errorf("%d slots: first turn-away at %d clients, under 90 %%", n, got)
		}
	}
}

// BenchmarkFirstTurnAway measures the sizing table of the README:
//
//	go test -run '^$' -bench FirstTurnAway -benchtime 1x .
func BenchmarkFirstTurnAway(b *testing.B) {
	for _, n := range []int{64, 256, 1024, 4096, 16384, 65536, MaxSlots} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			var got int
			for b.Loop() {
				got = firstTurnAway(b, n)
			}
			b.ReportMetric(float64(got), "clients")
			b.ReportMetric(100*float64(got)/float64(n), "%slots")
		})
	}
}

// TestSpentBucketsAreNotEvicted: clients that spent their bucket share a
// full table with a stream of new clients. Each new client takes the slot
// of a bucket that still has requests left, never a spent one, so a spent
// client stays refused until its bucket refills (here: the clock barely
// moves), however many new clients arrive and in whatever order. This
// holds for token_bucket rules (burst 10, 10 a minute: a spent bucket
// holds no token); a fixed window's bucket holds 2^32 tokens whatever its
// limit, so the store cannot tell a spent window (see the package
// documentation). Under the old rule (evict the bucket that expires first)
// the oldest bucket went, and a spent client came back with a fresh one.
func TestSpentBucketsAreNotEvicted(t *testing.T) {
	limits := map[string]string{
		"token_bucket": `{"unit": "minute", "requests_per_unit": 10, "algorithm": "token_bucket", "burst": 10}`,
	}
	for _, alg := range []string{"token_bucket"} {
		for _, slots := range []int{8, 64, 512} {
			t.Run(alg+"/"+strconv.Itoa(slots), func(t *testing.T) {
				cfg := perAddress(limits[alg], `, "slots": `+strconv.Itoa(slots)+`, "table_full": "evict_oldest"`)
				spentBucketsStay(t, cfg, slots)
			})
		}
	}
}

func spentBucketsStay(t *testing.T, cfg string, slots int) {
	t.Helper()
	env := newFakeEnvoy()
	vm := env.vm(t, cfg)
	rng := rand.New(rand.NewPCG(uint64(slots), 7))
	spenders := slots / 2
	refused := make([]bool, spenders)
	next := spenders // new clients' addresses
	for step := range 40 * slots {
		env.clock.Add(int64(time.Millisecond) / 16)
		if rng.IntN(3) > 0 {
			c := rng.IntN(spenders)
			switch r := vm.do(clientAddr(c), nil); {
			case r.status == 429:
				refused[c] = true
			case refused[c]:
				t.Fatalf("step %d: spender %d admitted after it was refused: its spent bucket was evicted", step, c)
			}
			continue
		}
		if r := vm.do(clientAddr(next), nil); r.status != 200 {
			t.Fatalf("step %d: new client refused: %d %s", step, r.status, r.details)
		}
		next++
	}
	if env.metric(t, "rules", "evicted") == 0 {
		t.Fatal("nothing evicted: the test did not test eviction")
	}
	spent := 0
	for _, r := range refused {
		if r {
			spent++
		}
	}
	if spent < spenders/2 {
		t.Fatalf("only %d of %d spenders spent their bucket: the test did not test spent buckets", spent, spenders)
	}
}
