package wasmfilter

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/shareddata"
)

const t0 = int64(1_780_000_000_000_000_000) // a wall-clock instant in 2026

func newClock() *atomic.Int64 {
	c := new(atomic.Int64)
	c.Store(t0)
	return c
}

const basicConfig = `{
  "policies": [{
    "name": "per-client",
    "match": {"path_prefix": "/api/"},
    "key": ["source.address"],
    "bandwidths": [{"capacity": 3, "refill_tokens": 1, "period": "10s"}]
  }],
  "headers": {"ietf": true, "x_ratelimit": true},
  "deny": {"body": "slow down\n"}
}`

func TestAdmitThenReject(t *testing.T) {
	vm := newFakeVM(t, shareddata.New(), newClock(), basicConfig)
	for i, want := range []string{"2", "1", "0"} {
		r := vm.do("10.0.0.1:4000", map[string]string{":path": "/api/x"})
		if r.status != 200 {
			t.Fatalf("request %d: status %d", i, r.status)
		}
		if got := r.headers["x-ratelimit-remaining"]; got != want {
			t.Errorf("request %d: remaining %q, want %q", i, got, want)
		}
		if got := r.headers["x-ratelimit-limit"]; got != "3" {
			t.Errorf("limit %q", got)
		}
		// w: an empty bucket refills its 3 tokens in 30 s
		if got := r.headers["ratelimit-policy"]; got != `"per-client";q=3;w=30` {
			t.Errorf("RateLimit-Policy %q", got)
		}
		// t: full again after (3-remaining) tokens at 10 s each; with
		// nothing left, when the next token comes.
		wantT := fmt.Sprint(10 * (i + 1))
		if want == "0" {
			wantT = "10"
		}
		if got := r.headers["ratelimit"]; got != `"per-client";r=`+want+`;t=`+wantT {
			t.Errorf("RateLimit %q, want t=%s", got, wantT)
		}
		if _, ok := r.headers["retry-after"]; ok {
			t.Error("Retry-After on a 200")
		}
	}
	r := vm.do("10.0.0.1:4001", map[string]string{":path": "/api/x"}) // another port, same client
	if r.status != 429 {
		t.Fatalf("4th request: status %d, want 429", r.status)
	}
	for k, want := range map[string]string{
		"retry-after": "10", "x-envoy-ratelimited": "true", "x-ratelimit-remaining": "0",
		"ratelimit": `"per-client";r=0;t=10`, "content-type": "text/plain",
	} {
		if got := r.headers[k]; got != want {
			t.Errorf("429 %s = %q, want %q", k, got, want)
		}
	}
	if r.body != "slow down\n" {
		t.Errorf("body %q", r.body)
	}
}

func TestRetryAfterIsCeilingAndRefillAdmits(t *testing.T) {
	clock := newClock()
	vm := newFakeVM(t, shareddata.New(), clock, basicConfig)
	for range 3 {
		vm.do("10.0.0.1:1", map[string]string{":path": "/api/"})
	}
	clock.Add(int64(9*time.Second + 1)) // 0.999999999 s still to wait
	r := vm.do("10.0.0.1:1", map[string]string{":path": "/api/"})
	if r.status != 429 || r.headers["retry-after"] != "1" {
		t.Fatalf("status %d retry-after %q, want 429 and 1", r.status, r.headers["retry-after"])
	}
	clock.Add(int64(time.Second) - 2) // 1 ns short of the refill
	if r := vm.do("10.0.0.1:1", map[string]string{":path": "/api/"}); r.status != 429 {
		t.Fatalf("admitted 1 ns before the refill")
	}
	clock.Add(1)
	if r := vm.do("10.0.0.1:1", map[string]string{":path": "/api/"}); r.status != 200 {
		t.Fatalf("refilled token refused: %d", r.status)
	}
	if r := vm.do("10.0.0.1:1", map[string]string{":path": "/api/"}); r.status != 429 {
		t.Fatalf("second request after one refill admitted")
	}
}

func TestSeparateKeysAndRouteMatch(t *testing.T) {
	vm := newFakeVM(t, shareddata.New(), newClock(), basicConfig)
	for range 3 {
		vm.do("10.0.0.1:1", map[string]string{":path": "/api/"})
	}
	if r := vm.do("10.0.0.1:1", map[string]string{":path": "/api/"}); r.status != 429 {
		t.Fatal("not limited")
	}
	if r := vm.do("10.0.0.2:1", map[string]string{":path": "/api/"}); r.status != 200 {
		t.Fatal("another client limited")
	}
	if r := vm.do("[2001:db8::1]:1", map[string]string{":path": "/api/"}); r.status != 200 {
		t.Fatal("an IPv6 client limited")
	}
	r := vm.do("10.0.0.1:1", map[string]string{":path": "/static/app.js"})
	if r.status != 200 || len(r.headers) != 0 {
		t.Fatalf("unmatched route: status %d headers %v", r.status, r.headers)
	}
}

func TestHeaderKeyAndSeveralPolicies(t *testing.T) {
	cfg := `{
	  "policies": [
	    {"name": "global", "bandwidths": [{"capacity": 100, "period": "1s"}]},
	    {"name": "per-key", "key": ["header:X-Api-Key", ":path"], "cost": 2,
	     "bandwidths": [{"id": "burst", "capacity": 4, "period": "1m"}, {"id": "day", "capacity": 1000, "period": "24h"}]}
	  ],
	  "headers": {"ietf": true, "x_ratelimit": true}
	}`
	vm := newFakeVM(t, shareddata.New(), newClock(), cfg)
	a := map[string]string{":path": "/a", "x-api-key": "k1"}
	r := vm.do("", a)
	if r.status != 200 {
		t.Fatal(r.status)
	}
	// Every bandwidth of every policy, in requests of the policy's cost.
	if got := r.headers["ratelimit-policy"]; got != `"global";q=100;w=1, "per-key/burst";q=2;w=60, "per-key/day";q=500;w=86400` {
		t.Errorf("policy header %q", got)
	}
	if got := r.headers["ratelimit"]; got != `"global";r=99;t=1, "per-key/burst";r=1;t=30, "per-key/day";r=499;t=173` {
		t.Errorf("RateLimit %q", got)
	}
	if got := r.headers["x-ratelimit-remaining"]; got != "1" || r.headers["x-ratelimit-limit"] != "2" {
		t.Errorf("binding remaining %q of %q, want 1 of 2 (per-key/burst)", got, r.headers["x-ratelimit-limit"])
	}
	vm.do("", a)
	if r := vm.do("", a); r.status != 429 {
		t.Fatal("cost 2 of capacity 4: third request admitted")
	}
	if r := vm.do("", map[string]string{":path": "/b", "x-api-key": "k1"}); r.status != 200 {
		t.Fatal("another path shares the bucket")
	}
	if r := vm.do("", map[string]string{":path": "/a", "x-api-key": "k2"}); r.status != 200 {
		t.Fatal("another key shares the bucket")
	}
	if r := vm.do("", map[string]string{":path": "/a"}); r.status != 200 {
		t.Fatal("a request without the header refused")
	}
}

func TestBadConfigurationRefused(t *testing.T) {
	cases := map[string]string{
		"not json":        `{`,
		"no policies":     `{"policies": []}`,
		"unknown field":   `{"policies": [{"name": "a", "bandwidths": [{"capacity": 1, "period": "1s"}]}], "fail": 1}`,
		"bad name":        `{"policies": [{"name": "a b", "bandwidths": [{"capacity": 1, "period": "1s"}]}]}`,
		"bad period":      `{"policies": [{"name": "a", "bandwidths": [{"capacity": 1, "period": "soon"}]}]}`,
		"zero capacity":   `{"policies": [{"name": "a", "bandwidths": [{"capacity": 0, "period": "1s"}]}]}`,
		"too fast":        `{"policies": [{"name": "a", "bandwidths": [{"capacity": 10, "period": "5ns"}]}]}`,
		"bad style":       `{"policies": [{"name": "a", "bandwidths": [{"capacity": 1, "period": "1s", "style": "x"}]}]}`,
		"bad key":         `{"policies": [{"name": "a", "key": ["x-forwarded-for"], "bandwidths": [{"capacity": 1, "period": "1s"}]}]}`,
		"bad prefix":      `{"policies": [{"name": "a", "match": {"path_prefix": "api"}, "bandwidths": [{"capacity": 1, "period": "1s"}]}]}`,
		"bad mode":        `{"failure_mode": "maybe", "policies": [{"name": "a", "bandwidths": [{"capacity": 1, "period": "1s"}]}]}`,
		"duplicate":       `{"policies": [{"name": "a", "bandwidths": [{"capacity": 1, "period": "1s"}]}, {"name": "a", "bandwidths": [{"capacity": 1, "period": "1s"}]}]}`,
		"duplicate bw id": `{"policies": [{"name": "a", "bandwidths": [{"id": "x", "capacity": 1, "period": "1s"}, {"id": "x", "capacity": 2, "period": "1s"}]}]}`,
		"too many slots":  `{"policies": [{"name": "a", "slots": 2000000, "bandwidths": [{"capacity": 1, "period": "1s"}]}]}`,
		"empty":           ``,
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost(shareddata.New(), newClock(), cfg)
			vm := NewVM(h)
			vm.OnContextCreate(1, 0)
			if vm.OnConfigure(1, len(cfg)) {
				t.Fatal("invalid configuration accepted")
			}
			if len(h.logs) == 0 || !strings.HasPrefix(h.logs[len(h.logs)-1], "wasmfilter: invalid plugin configuration: ") ||
				strings.Count(h.logs[len(h.logs)-1], "wasmfilter:") != 1 {
				t.Fatalf("reason not logged once, with one prefix: %q", h.logs)
			}
			// An unconfigured plugin lets traffic through untouched.
			vm.OnContextCreate(2, 1)
			if vm.OnRequestHeaders(2, 0, true) != ActionContinue {
				t.Fatal("unconfigured plugin paused a request")
			}
		})
	}
}

func TestFailureModes(t *testing.T) {
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) {
			shared := shareddata.New()
			cfg := strings.Replace(basicConfig, `"headers"`, `"failure_mode": "`+mode+`", "headers"`, 1)
			vm := newFakeVM(t, shared, newClock(), cfg)
			shared.Fail = func(op, key string) uint32 { return 10 } // INTERNAL_FAILURE
			r := vm.do("10.0.0.1:1", map[string]string{":path": "/api/"})
			switch mode {
			case "open":
				if r.status != 200 {
					t.Fatalf("fail-open rejected: %d", r.status)
				}
			case "closed":
				if r.status != 429 || r.headers["retry-after"] != "1" {
					t.Fatalf("fail-closed: %d %v", r.status, r.headers)
				}
			}
			if !strings.Contains(strings.Join(vm.host.logs, "\n"), "INTERNAL_FAILURE") {
				t.Errorf("failure not logged: %q", vm.host.logs)
			}
		})
	}
}

func TestContentionRejectsEvenWhenFailOpen(t *testing.T) {
	shared := shareddata.New()
	clock := newClock()
	vm := newFakeVM(t, shared, clock, strings.Replace(basicConfig, `"headers"`, `"max_attempts": 3, "headers"`, 1))
	vm.do("10.0.0.1:1", map[string]string{":path": "/api/"}) // the bucket exists
	// Another VM writes between every read and write of this one.
	other := newFakeVM(t, shared, clock, basicConfig)
	var inside bool
	shared.BeforeSet = func(key string) {
		if inside {
			return
		}
		inside = true
		clock.Add(int64(10 * time.Second)) // keep a token for the other VM
		other.do("10.0.0.1:1", map[string]string{":path": "/api/"})
		inside = false
	}
	r := vm.do("10.0.0.1:1", map[string]string{":path": "/api/"})
	if r.status != 429 || r.headers["retry-after"] != "1" {
		t.Fatalf("contended request: %d %v", r.status, r.headers)
	}
	if !strings.Contains(strings.Join(vm.host.logs, "\n"), "gave up after 3 lost compare-and-swap races") {
		t.Errorf("contention not logged: %q", vm.host.logs)
	}
}

// TestTwoVMsExactAccounting runs VMs (Envoy workers) in parallel on one
// shared data with a frozen clock: exactly capacity requests pass. The hot
// bucket is created first: its creation is the one unconditional write (see
// TestFirstInsertRaceIsBounded).
func TestTwoVMsExactAccounting(t *testing.T) {
	const capacity, perVM, vms = 500, 400, 4
	cfg := `{"max_attempts": 1000, "policies": [{"name": "p", "key": ["header:k"],
	  "bandwidths": [{"capacity": 500, "refill_tokens": 1, "period": "1h"}]}]}`
	shared := shareddata.New()
	clock := newClock()
	var admitted, own atomic.Int64
	var wg sync.WaitGroup
	for v := range vms {
		vm := newFakeVM(t, shared, clock, cfg)
		if v == 0 && vm.do("", map[string]string{"k": "hot"}).status == 200 {
			admitted.Add(1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perVM {
				// Two keys: one hot, one per VM; the per-VM key checks
				// that slot probing keeps them apart.
				key := "hot"
				if i%4 == 0 {
					key = fmt.Sprint("vm", v)
				}
				if vm.do("", map[string]string{"k": key}).status == 200 {
					if key == "hot" {
						admitted.Add(1)
					} else {
						own.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != capacity {
		t.Fatalf("admitted %d on the hot key, want exactly %d", got, capacity)
	}
	if got := own.Load(); got != vms*perVM/4 {
		t.Fatalf("admitted %d on the per-VM keys, want all %d", got, vms*perVM/4)
	}
}

func TestUnknownFieldsNamed(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"policies": [{"name": "a", "bandwidths": [{"capacity": 1, "period": "1s", "burst": 2}]}]}`: `policies[0].bandwidths[0].burst: unknown member`,
		`{"headers": {"ietf": true, "draft_03": 6}, "policies": []}`:                                 `headers.draft_03: unknown member`,
	} {
		_, err := ParseConfig([]byte(cfg))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %s", cfg, err, want)
		}
	}
}

// BenchmarkNativeRequest is the filter's own cost per admitted request,
// natively on the fake host: key from source.address, one shared-data read,
// wire.Process, one compare-and-swap write, IETF and x-ratelimit headers.
func BenchmarkNativeRequest(b *testing.B) {
	cfg := `{"policies": [{"name": "p", "key": ["source.address"],
	  "bandwidths": [{"capacity": 1000000000, "period": "1s"}]}], "headers": {"ietf": true, "x_ratelimit": true}}`
	shared := shareddata.New()
	vm := newFakeVM(b, shared, newClock(), cfg)
	h := map[string]string{":path": "/"}
	b.ReportAllocs()
	cpu0 := cpuTime()
	calls0 := shared.Gets() + shared.Sets()
	for b.Loop() {
		if vm.do("192.0.2.1:1", h).status != 200 {
			b.Fatal("rejected")
		}
	}
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
	b.ReportMetric(float64(shared.Gets()+shared.Sets()-calls0)/float64(b.N), "shared-data-calls/op")
}

func TestLongKeysAreDigested(t *testing.T) {
	cfg := `{"policies": [{"name": "p", "key": ["header:x-api-key"], "bandwidths": [{"capacity": 1, "period": "1h"}]}]}`
	shared := shareddata.New()
	vm := newFakeVM(t, shared, newClock(), cfg)
	long := strings.Repeat("k", 10000)
	if r := vm.do("", map[string]string{"x-api-key": long}); r.status != 200 {
		t.Fatal(r.status)
	}
	if r := vm.do("", map[string]string{"x-api-key": long}); r.status != 429 {
		t.Fatal("the long key's bucket was not found again")
	}
	if r := vm.do("", map[string]string{"x-api-key": long + "x"}); r.status != 200 {
		t.Fatal("another long key shares the bucket")
	}
	for i := range 4096 {
		if v, _, st := shared.Get(fmt.Sprintf("bucketgrid/p/s/%d", i)); st == 0 && len(v) > 200 {
			t.Fatalf("slot %d holds %d bytes", i, len(v))
		}
	}
	// Keys that are not valid UTF-8 are digested too, and limited like any.
	for i, want := range []int{200, 429} {
		if r := vm.do("", map[string]string{"x-api-key": "\xff\xfe"}); r.status != want {
			t.Fatalf("invalid UTF-8 key, request %d: %d", i, r.status)
		}
	}
}

// TestDigestsHaveTheirOwnNamespace is a regression test: a
// long key's bucket is stored under a digest, and no short key a client
// can send may land in that bucket — before, the header value
// "#<hex SHA-256 of the long key>" did.
func TestDigestsHaveTheirOwnNamespace(t *testing.T) {
	cfg := `{"policies": [{"name": "p", "key": ["header:x-api-key"], "bandwidths": [{"capacity": 1, "period": "1h"}]}]}`
	vm := newFakeVM(t, shareddata.New(), newClock(), cfg)
	long := strings.Repeat("k", 200)
	vm.do("", map[string]string{"x-api-key": long})
	if r := vm.do("", map[string]string{"x-api-key": long}); r.status != 429 {
		t.Fatal("the long key is not limited")
	}
	for _, digest := range []string{
		sha256Hex("p\x00" + long), // the digest of the whole key
		sha256Hex(long),           // of the header value alone
	} {
		for _, v := range []string{"#" + digest, digest} {
			if r := vm.do("", map[string]string{"x-api-key": v}); r.status != 200 {
				t.Errorf("header %q shares the long key's bucket", v)
			}
		}
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestNoKeyInLogs runs every path that logs while serving — shared-data
// failures (open and closed), contention, a full table (reject and allow),
// a failed refund — with keys no log line may contain.
func TestNoKeyInLogs(t *testing.T) {
	const secret, addr = "SECRET-api-key-0123456789", "203.0.113.77"
	keys := map[string]string{":path": "/api/x", "x-api-key": secret}
	run := func(cfg string, setup func(env *fakeEnvoy, vm *fakeVM)) []string {
		env := newFakeEnvoy()
		vm := env.vm(t, cfg)
		setup(env, vm)
		return vm.host.logs
	}
	pol := func(extra string) string {
		return `{` + extra + ` "max_attempts": 2, "policies": [
		  {"name": "a", "key": ["header:x-api-key", "source.address"], "slots": 1, "bandwidths": [{"capacity": 5, "period": "1h"}]},
		  {"name": "b", "key": [":path", "header:x-api-key"], "bandwidths": [{"capacity": 1, "period": "1h"}]}]}`
	}
	var logs []string
	for _, mode := range []string{"open", "closed"} {
		logs = append(logs, run(pol(`"failure_mode": "`+mode+`",`), func(env *fakeEnvoy, vm *fakeVM) {
			env.shared.Fail = func(op, key string) uint32 { return uint32(StatusInternalFailure) }
			vm.do(addr+":1", keys)
		})...)
	}
	logs = append(logs, run(pol(""), func(env *fakeEnvoy, vm *fakeVM) {
		vm.do(addr+":1", keys)
		other := env.vm(t, pol(""))
		var inside bool
		env.shared.BeforeSet = func(string) {
			if !inside {
				inside = true
				other.do(addr+":1", keys)
				inside = false
			}
		}
		vm.do(addr+":1", keys)
	})...)
	for _, full := range []string{"reject", "allow"} {
		logs = append(logs, run(pol(`"table_full": "`+full+`",`), func(env *fakeEnvoy, vm *fakeVM) {
			vm.do("198.51.100.1:1", nil)
			vm.do(addr+":1", keys)
		})...)
	}
	logs = append(logs, run(pol(""), func(env *fakeEnvoy, vm *fakeVM) {
		vm.do(addr+":1", keys) // a and b admitted
		sets := 0
		env.shared.Fail = func(op, key string) uint32 {
			if op == "set" {
				sets++
				if sets > 1 { // a's consumption succeeds, its refund fails
					return uint32(StatusInternalFailure)
				}
			}
			return 0
		}
		env.clock.Add(int64(time.Second)) // past the log limiter
		vm.do(addr+":1", keys)            // b refuses, a's refund fails
	})...)
	joined := strings.Join(logs, "\n")
	for _, want := range []string{"failure_mode open", "failure_mode closed", "compare-and-swap", "table_full reject",
		"table_full allow", "refund"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no log line about %q: %q", want, logs)
		}
	}
	for _, l := range logs {
		if strings.Contains(l, "SECRET") || strings.Contains(l, addr) || strings.Contains(l, "/api/x") || strings.ContainsRune(l, 0) {
			t.Errorf("log line carries a key: %q", l)
		}
	}
}

// TestInvalidKeyIsTheClientsError: a key the store refuses is answered 400
// and counted; it never reaches the failure mode (fail-open would make it a
// way around the limit). The filter digests every key into one the store
// holds, so this guards the path rather than a case a request can reach.
func TestInvalidKeyIsTheClientsError(t *testing.T) {
	env := newFakeEnvoy()
	vm := env.vm(t, `{"failure_mode": "open", "policies": [{"name": "p", "bandwidths": [{"capacity": 1, "period": "1h"}]}]}`)
	p := vm.vm.plugins[1]
	pol := &p.set.policies[0]
	r, pass := p.failure(pol, fmt.Errorf("%w: get: %w", cas.ErrStore, core.InvalidKey("k", "test")))
	if pass || r.status != 400 || r.details != "bucketgrid_invalid_key" {
		t.Fatalf("invalid key: pass %v, %+v", pass, r)
	}
	if env.metric(t, "p", "invalid_key") != 1 || env.metric(t, "p", "failure_mode_allowed") != 0 {
		t.Fatal("not counted as an invalid key")
	}
}

func TestRejectionRefundsEarlierPolicies(t *testing.T) {
	cfg := `{"policies": [
	    {"name": "wide", "bandwidths": [{"capacity": 5, "refill_tokens": 1, "period": "1h"}]},
	    {"name": "narrow", "match": {"path_prefix": "/narrow"}, "bandwidths": [{"capacity": 1, "refill_tokens": 1, "period": "1h"}]}
	  ], "headers": {"ietf": true}}`
	vm := newFakeVM(t, shareddata.New(), newClock(), cfg)
	if r := vm.do("", map[string]string{":path": "/narrow"}); r.status != 200 {
		t.Fatal(r.status)
	}
	for range 3 { // rejected by narrow: wide must not be charged
		r := vm.do("", map[string]string{":path": "/narrow"})
		if r.status != 429 {
			t.Fatal("narrow admitted twice")
		}
		if got := r.headers["ratelimit"]; got != `"wide";r=4;t=3600, "narrow";r=0;t=3600` {
			t.Errorf("RateLimit %q", got)
		}
	}
	admitted := 0
	for range 10 {
		if vm.do("", map[string]string{":path": "/wide"}).status == 200 {
			admitted++
		}
	}
	if admitted != 4 {
		t.Fatalf("wide admitted %d after the rejections, want the 4 left", admitted)
	}
}

func TestFailureLogsAreRateLimited(t *testing.T) {
	shared, clock := shareddata.New(), newClock()
	vm := newFakeVM(t, shared, clock, basicConfig)
	shared.Fail = func(op, key string) uint32 { return uint32(StatusInternalFailure) }
	n := len(vm.host.logs)
	for range 100 {
		vm.do("10.0.0.1:1", map[string]string{":path": "/api/"})
	}
	if got := len(vm.host.logs) - n; got != 1 {
		t.Fatalf("%d log lines for 100 failures in one instant, want 1", got)
	}
	clock.Add(int64(time.Second))
	vm.do("10.0.0.1:1", map[string]string{":path": "/api/"})
	if last := vm.host.logs[len(vm.host.logs)-1]; !strings.Contains(last, "99 similar messages suppressed") {
		t.Fatalf("last log %q", last)
	}
}

func TestTwoPluginsInOneVM(t *testing.T) {
	shared, clock := shareddata.New(), newClock()
	h := newFakeHost(shared, clock, "")
	vm := NewVM(h)
	for id, cfg := range map[uint32]string{
		1: `{"policies": [{"name": "a", "bandwidths": [{"capacity": 1, "period": "1h"}]}]}`,
		2: `{"policies": [{"name": "b", "bandwidths": [{"capacity": 2, "period": "1h"}]}]}`,
	} {
		vm.OnContextCreate(id, 0)
		h.config = []byte(cfg)
		if !vm.OnConfigure(id, len(cfg)) {
			t.Fatal(h.logs)
		}
	}
	f := &fakeVM{vm: vm, host: h, next: 10}
	count := func(root uint32) int {
		n := 0
		for range 5 {
			id := f.next
			f.next++
			h.local = nil
			vm.OnContextCreate(id, root)
			if vm.OnRequestHeaders(id, 0, true) == ActionContinue {
				n++
			}
			vm.OnDelete(id)
		}
		return n
	}
	if a, b := count(1), count(2); a != 1 || b != 2 {
		t.Fatalf("plugin a admitted %d (want 1), plugin b %d (want 2)", a, b)
	}
	// Reconfiguring keeps the buckets: same names, same shared data.
	h.config = []byte(`{"policies": [{"name": "a", "bandwidths": [{"capacity": 1, "period": "1h"}]}]}`)
	if !vm.OnConfigure(1, len(h.config)) || count(1) != 0 {
		t.Fatal("reconfiguration reset the bucket")
	}
}

func TestHostOf(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1:5000":      "10.0.0.1",
		"[2001:db8::1]:5000": "2001:db8::1",
		"10.0.0.1":           "10.0.0.1",
		"2001:db8::1":        "2001:db8::1",
		"[::1":               "[::1",
		"/run/envoy.sock":    "/run/envoy.sock",
		"":                   "",
	} {
		if got := hostOf(in); got != want {
			t.Errorf("hostOf(%q) = %q, want %q", in, got, want)
		}
	}
}
