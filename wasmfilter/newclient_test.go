package wasmfilter

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// slotCounter is a fakeHost that counts the slot records read.
type slotCounter struct {
	*fakeHost
	reads int
}

func (h *slotCounter) SharedData(key string) ([]byte, uint32, error) {
	if strings.Contains(key, "/s/") {
		h.reads++
	}
	return h.fakeHost.SharedData(key)
}

// work is what requests cost on average, counted rather than timed: heap
// allocations and bytes (a proxy of the guest's CPU: every record read,
// decoded and written allocates) and the slot records read.
type work struct{ allocs, bytes, slotReads float64 }

// measure runs one warm-up and then n calls of req on one P, and returns
// their average work.
func measure(h *slotCounter, n int, req func()) work {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	req()
	var a, b runtime.MemStats
	reads := h.reads
	runtime.ReadMemStats(&a)
	for range n {
		req()
	}
	runtime.ReadMemStats(&b)
	return work{
		allocs:    float64(b.Mallocs-a.Mallocs) / float64(n),
		bytes:     float64(b.TotalAlloc-a.TotalAlloc) / float64(n),
		slotReads: float64(h.reads-reads) / float64(n),
	}
}

// TestNewClientCostsAtMostTwiceAKnownOne: at a full table (every slot
// holds a live bucket, table_full evict_oldest), a client the table has
// never seen costs at most twice what a known client costs, counted in
// allocations (bytes are logged), and reads a bounded number of slot
// records (a lookup of its directory, evictSample probes) rather than the
// Probes of its probe sequence. Without the memory of a full table every
// new client read all 128 probed slots: 11.7x a known client's CPU.
// Clients arrive with the clock frozen (every bucket stays live) and then
// one every 50 ms of a 60 an hour token bucket, a table that turns over
// every 13 s and never frees a slot by expiry.
func TestNewClientCostsAtMostTwiceAKnownOne(t *testing.T) {
	const slots, clients = 256, 1000
	for _, step := range []time.Duration{0, 50 * time.Millisecond} {
		t.Run("step="+step.String(), func(t *testing.T) {
			env, h, f, addrs := fullTable(t, slots, 2*slots+clients+1)
			evicted := env.metric(t, "rules", "evicted")
			if evicted == 0 {
				t.Fatal("the table is not full: nothing evicted")
			}
			known := measure(h, 50, func() {
				if r := f.do(addrs[2*slots-1], nil); r.status != 200 {
					t.Fatalf("known client: %d %s", r.status, r.details)
				}
			})
			next := 2 * slots
			fresh := measure(h, clients, func() {
				env.clock.Add(int64(step))
				if r := f.do(addrs[next], nil); r.status != 200 {
					t.Fatalf("new client %d: %d %s", next, r.status, r.details)
				}
				next++
			})
			evicted = env.metric(t, "rules", "evicted") - evicted
			t.Logf("known client: %.1f allocations, %.0f bytes, %.2f slot reads; new client: %.1f allocations (%.2fx), %.0f bytes (%.2fx), %.2f slot reads; %d of %d new clients evicted a bucket",
				known.allocs, known.bytes, known.slotReads, fresh.allocs, fresh.allocs/known.allocs,
				fresh.bytes, fresh.bytes/known.bytes, fresh.slotReads, evicted, clients+1)
			if evicted < clients/2 {
				t.Errorf("%d of %d new clients evicted a bucket: the table was not full", evicted, clients+1)
			}
			if fresh.allocs > 2*known.allocs {
				t.Errorf("a new client costs %.1f allocations, a known one %.1f: over 2x", fresh.allocs, known.allocs)
			}
			if limit := float64(evictSample + 1); fresh.slotReads > limit {
				t.Errorf("a new client reads %.2f slots on average, want at most %v", fresh.slotReads, limit)
			}
		})
	}
}

// fullTable starts a VM whose rules give every client address a 60 an
// hour token bucket in a table of slots slots, and fills it with the first
// 2*slots of n client addresses, which it returns.
func fullTable(t testing.TB, slots, n int) (*fakeEnvoy, *slotCounter, *fakeVM, []string) {
	t.Helper()
	cfg := `{"domain": "d", "slots": ` + strconv.Itoa(slots) + `, "rate_limits": [{"actions": [{"remote_address": {}}]}],
	  "rules": [{"domain": "d", "descriptors": [{"key": "remote_address",
	    "rate_limit": {"unit": "hour", "requests_per_unit": 60, "algorithm": "token_bucket"}}]}]}`
	env := newFakeEnvoy()
	h := &slotCounter{fakeHost: newFakeHost(env.shared, env.clock, cfg)}
	h.stats = env.stats.VM()
	vm := NewVM(h)
	vm.OnContextCreate(1, 0)
	if !vm.OnVMStart(1, 0) || !vm.OnConfigure(1, len(cfg)) {
		t.Fatalf("configuration refused: %v", h.logs)
	}
	f := &fakeVM{vm: vm, host: h.fakeHost, next: 2}
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = clientAddr(i)
	}
	for _, a := range addrs[:2*slots] {
		f.do(a, nil)
	}
	return env, h, f, addrs
}

// BenchmarkNewClient measures new clients at a table of 256 slots that
// they keep full, one every step of fake time, natively: allocations and
// slot records read per new client. At step=230ms the table turns over
// about as fast as its buckets (60 an hour, so a minute after a client's
// request) expire, and a new client probes for the slot that has just
// freed:
//
//	go test -run '^$' -bench NewClient -benchtime 4000x .
func BenchmarkNewClient(b *testing.B) {
	const slots = 256
	for _, step := range []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond, 230 * time.Millisecond, time.Second} {
		b.Run("step="+step.String(), func(b *testing.B) {
			env, h, f, addrs := fullTable(b, slots, 2*slots)
			evicted, reads := env.metric(b, "rules", "evicted"), h.reads
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				env.clock.Add(int64(step))
				a := clientAddr(len(addrs) + i)
				i++
				if r := f.do(a, nil); r.status != 200 {
					b.Fatalf("new client: %d %s", r.status, r.details)
				}
			}
			b.ReportMetric(float64(h.reads-reads)/float64(b.N), "slot-reads/op")
			b.ReportMetric(float64(env.metric(b, "rules", "evicted")-evicted)/float64(b.N), "evicted/op")
		})
	}
}
