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

// basicConfig limits each client (remote_address) on paths under /api/ to
// a burst of 3 and one request every 10 s (a token bucket), with the IETF
// and x-ratelimit headers.
const basicConfig = `{
  "domain": "edge",
  "rate_limits": [{"actions": [
    {"header_value_match": {"descriptor_value": "api", "headers": [{"name": ":path", "prefix_match": "/api/"}]}},
    {"remote_address": {}}]}],
  "rules": [{"domain": "edge", "descriptors": [{"key": "header_match", "value": "api", "descriptors": [
    {"key": "remote_address", "rate_limit": {"name": "per-client", "unit": "minute", "requests_per_unit": 6,
      "algorithm": "token_bucket", "burst": 3}}]}]}],
  "headers": {"ietf": true, "x_ratelimit": true},
  "deny": {"body": "slow down\n"}
}`

// keyedConfig is a configuration of one descriptor built by request_headers
// of header into the key k, limited by limit (a rate_limit object); extra
// adds top-level members ("" or `, "slots": 8`).
func keyedConfig(header, limit, extra string) string {
	return `{"domain": "d", "rate_limits": [{"actions": [{"request_headers": {"header_name": "` + header +
		`", "descriptor_key": "k"}}]}], "rules": [{"domain": "d", "descriptors": [{"key": "k", "rate_limit": ` +
		limit + `}]}]` + extra + `}`
}

// perAddress is a configuration of one descriptor per client
// (remote_address), limited by limit; extra adds top-level members.
func perAddress(limit, extra string) string {
	return `{"domain": "d", "rate_limits": [{"actions": [{"remote_address": {}}]}], "rules": [{"domain": "d",
	  "descriptors": [{"key": "remote_address", "rate_limit": ` + limit + `}]}]` + extra + `}`
}

// TestAdmitThenReject: a client's burst is admitted with headers that
// count down, the next request is refused with Retry-After, and the
// x-ratelimit headers on the refusal describe the limit Retry-After waits
// for.
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
		// t: full again after (3-remaining) tokens at 10 s each
		wantT := fmt.Sprint(10 * (i + 1))
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
	// t: the next token, the wait Retry-After says
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

// TestHeaderKeysAndSeveralDescriptors: a request counts in every
// descriptor its actions build — a global one, and two for its API key and
// path told apart by a generic_key, one per limit — and each is reported;
// a request without the header builds only the global one, as Envoy's
// request_headers action skips a descriptor whose header is absent.
func TestHeaderKeysAndSeveralDescriptors(t *testing.T) {
	cfg := `{
	  "domain": "d",
	  "rate_limits": [
	    {"actions": [{"generic_key": {"descriptor_value": "global"}}]},
	    {"actions": [{"generic_key": {"descriptor_value": "burst"}},
	      {"request_headers": {"header_name": "X-Api-Key", "descriptor_key": "api_key"}},
	      {"request_headers": {"header_name": ":path", "descriptor_key": "path"}}]},
	    {"actions": [{"generic_key": {"descriptor_value": "day"}},
	      {"request_headers": {"header_name": "X-Api-Key", "descriptor_key": "api_key"}},
	      {"request_headers": {"header_name": ":path", "descriptor_key": "path"}}]}
	  ],
	  "rules": [{"domain": "d", "descriptors": [
	    {"key": "generic_key", "value": "global", "rate_limit": {"name": "global", "unit": "second", "requests_per_unit": 100}},
	    {"key": "generic_key", "value": "burst", "descriptors": [{"key": "api_key", "descriptors": [{"key": "path",
	      "rate_limit": {"name": "burst", "unit": "minute", "requests_per_unit": 2}}]}]},
	    {"key": "generic_key", "value": "day", "descriptors": [{"key": "api_key", "descriptors": [{"key": "path",
	      "rate_limit": {"name": "day", "unit": "day", "requests_per_unit": 500}}]}]}
	  ]}],
	  "headers": {"ietf": true, "x_ratelimit": true}
	}`
	vm := newFakeVM(t, shareddata.New(), newClock(), cfg)
	a := map[string]string{":path": "/a", "x-api-key": "k1"}
	r := vm.do("", a)
	if r.status != 200 {
		t.Fatal(r.status)
	}
	if got := r.headers["ratelimit-policy"]; !strings.Contains(got, `"global";q=100;w=1`) ||
		!strings.Contains(got, `"burst";q=2;w=60`) || !strings.Contains(got, `"day";q=500;w=86400`) {
		t.Errorf("RateLimit-Policy %q: not every limit", got)
	}
	if got := r.headers["x-ratelimit-remaining"]; got != "1" || r.headers["x-ratelimit-limit"] != "2" {
		t.Errorf("binding remaining %q of %q, want 1 of 2 (burst)", got, r.headers["x-ratelimit-limit"])
	}
	vm.do("", a)
	if r := vm.do("", a); r.status != 429 {
		t.Fatal("2 a minute: third request admitted")
	}
	if r := vm.do("", map[string]string{":path": "/b", "x-api-key": "k1"}); r.status != 200 {
		t.Fatal("another path shares the bucket")
	}
	if r := vm.do("", map[string]string{":path": "/a", "x-api-key": "k2"}); r.status != 200 {
		t.Fatal("another key shares the bucket")
	}
	r = vm.do("", map[string]string{":path": "/a"})
	if r.status != 200 || !strings.Contains(r.headers["ratelimit-policy"], "global") || strings.Contains(r.headers["ratelimit-policy"], "burst") {
		t.Fatalf("a request without the header: %d %q, want only the global limit", r.status, r.headers["ratelimit-policy"])
	}
}

func TestBadConfigurationRefused(t *testing.T) {
	const limits = `"rate_limits": [{"actions": [{"remote_address": {}}]}]`
	rule := func(limit string) string {
		return `{"domain": "d", ` + limits + `, "rules": [{"domain": "d", "descriptors": [{"key": "remote_address", "rate_limit": ` + limit + `}]}]}`
	}
	cases := map[string]string{
		"not json":       `{`,
		"no rules":       `{"domain": "d", ` + limits + `}`,
		"unknown field":  strings.Replace(rule(`{"unit": "second", "requests_per_unit": 1}`), `{"domain"`, `{"fail": 1, "domain"`, 1),
		"former format":  `{"policies": [{"name": "a", "bandwidths": [{"capacity": 1, "period": "1s"}]}]}`,
		"bad unit":       rule(`{"unit": "soon", "requests_per_unit": 1}`),
		"bad algorithm":  rule(`{"unit": "second", "requests_per_unit": 1, "algorithm": "leaky"}`),
		"too fast":       rule(`{"unit": "second", "requests_per_unit": 1000000000}`),
		"burst, window":  rule(`{"unit": "second", "requests_per_unit": 1, "burst": 5}`),
		"bad action":     `{"domain": "d", "rate_limits": [{"actions": [{"source_cluster": {}}]}], "rules": []}`,
		"bad mode":       strings.Replace(rule(`{"unit": "second", "requests_per_unit": 1}`), `{"domain"`, `{"failure_mode": "maybe", "domain"`, 1),
		"duplicate":      `{"domain": "d", ` + limits + `, "rules": [{"domain": "d", "descriptors": [{"key": "k"}, {"key": "k"}]}]}`,
		"too many slots": strings.Replace(rule(`{"unit": "second", "requests_per_unit": 1}`), `{"domain"`, `{"slots": 2000000, "domain"`, 1),
		"empty":          ``,
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
			cfg := strings.Replace(basicConfig, `"domain"`, `"failure_mode": "`+mode+`", "domain"`, 1)
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
	vm := newFakeVM(t, shared, clock, strings.Replace(basicConfig, `"domain"`, `"max_attempts": 3, "domain"`, 1))
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
	cfg := keyedConfig("k", `{"unit": "hour", "requests_per_unit": 500}`, `, "max_attempts": 1000`)
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
		`{"rules": [{"domain": "d", "descriptors": [{"key": "k", "rate_limit": {"unit": "second", "bursts": 2}}]}]}`: `rules[0].descriptors[0].rate_limit.bursts: unknown member`,
		`{"headers": {"ietf": true, "draft_03": 6}, "rules": []}`:                                                    `headers.draft_03: unknown member`,
	} {
		_, err := ParseConfig([]byte(cfg))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %s", cfg, err, want)
		}
	}
}

// BenchmarkNativeRequest is the filter's own cost per admitted request,
// natively on the fake host: one descriptor from remote_address, one
// shared-data read, wire.Process, one compare-and-swap write, IETF and
// x-ratelimit headers.
func BenchmarkNativeRequest(b *testing.B) {
	cfg := perAddress(`{"unit": "year", "requests_per_unit": 1000000000}`, `, "headers": {"ietf": true, "x_ratelimit": true}`)
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

// TestLongKeysAreDigested: a key longer than a slot holds is stored under
// its digest and found again; a descriptor over policy.MaxDescriptorBytes
// is refused as a whole, as the rate-limit service refuses it.
func TestLongKeysAreDigested(t *testing.T) {
	cfg := keyedConfig("x-api-key", `{"unit": "hour", "requests_per_unit": 1}`, "")
	shared := shareddata.New()
	vm := newFakeVM(t, shared, newClock(), cfg)
	long := strings.Repeat("k", 4000)
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
		if v, _, st := shared.Get(fmt.Sprintf("bucketgrid/rules/s/%d", i)); st == 0 && len(v) > 200 {
			t.Fatalf("slot %d holds %d bytes", i, len(v))
		}
	}
	// Keys that are not valid UTF-8 are limited like any.
	for i, want := range []int{200, 429} {
		if r := vm.do("", map[string]string{"x-api-key": "\xff\xfe"}); r.status != want {
			t.Fatalf("invalid UTF-8 key, request %d: %d", i, r.status)
		}
	}
	if r := vm.do("", map[string]string{"x-api-key": strings.Repeat("k", 10000)}); r.status != 429 {
		t.Fatalf("a descriptor of 10000 bytes: %d, want 429", r.status)
	}
}

// TestDigestsHaveTheirOwnNamespace is a regression test: a
// long key's bucket is stored under a digest, and no short key a client
// can send may land in that bucket — before, the header value
// "#<hex SHA-256 of the long key>" did.
func TestDigestsHaveTheirOwnNamespace(t *testing.T) {
	cfg := keyedConfig("x-api-key", `{"unit": "hour", "requests_per_unit": 1}`, "")
	vm := newFakeVM(t, shareddata.New(), newClock(), cfg)
	long := strings.Repeat("k", 200)
	vm.do("", map[string]string{"x-api-key": long})
	if r := vm.do("", map[string]string{"x-api-key": long}); r.status != 429 {
		t.Fatal("the long key is not limited")
	}
	for _, digest := range []string{
		sha256Hex(`"d"/"k"="` + long + `"`), // the digest of the whole key
		sha256Hex(long),                     // of the header value alone
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
// with keys no log line may contain.
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
		return `{` + extra + ` "max_attempts": 2, "slots": 1, "domain": "d", "rate_limits": [
		  {"actions": [{"request_headers": {"header_name": "x-api-key", "descriptor_key": "k"}}, {"remote_address": {}}]},
		  {"actions": [{"request_headers": {"header_name": ":path", "descriptor_key": "p"}}, {"request_headers": {"header_name": "x-api-key", "descriptor_key": "k"}}]}],
		  "rules": [{"domain": "d", "descriptors": [
		    {"key": "k", "descriptors": [{"key": "remote_address", "rate_limit": {"unit": "hour", "requests_per_unit": 5}}]},
		    {"key": "p", "descriptors": [{"key": "k", "rate_limit": {"unit": "hour", "requests_per_unit": 1}}]}]}]}`
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
			vm.do("198.51.100.1:1", map[string]string{"x-api-key": "other"})
			vm.do(addr+":1", keys)
		})...)
	}
	joined := strings.Join(logs, "\n")
	for _, want := range []string{"failure_mode open", "failure_mode closed", "compare-and-swap", "table_full reject",
		"table_full allow"} {
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
	vm := env.vm(t, perAddress(`{"unit": "hour", "requests_per_unit": 1}`, `, "failure_mode": "open"`))
	p := vm.vm.plugins[1]
	r, pass := p.failure(fmt.Errorf("%w: get: %w", cas.ErrStore, core.InvalidKey("k", "test")))
	if pass || r.status != 400 || r.details != "bucketgrid_invalid_key" {
		t.Fatalf("invalid key: pass %v, %+v", pass, r)
	}
	if env.metric(t, "rules", "invalid_key") != 1 || env.metric(t, "rules", "failure_mode_allowed") != 0 {
		t.Fatal("not counted as an invalid key")
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

// pluginConfig limits every request of domain to n an hour.
func pluginConfig(domain string, n int) string {
	return `{"domain": "` + domain + `", "rate_limits": [{"actions": [{"generic_key": {"descriptor_value": "all"}}]}],
	  "rules": [{"domain": "` + domain + `", "descriptors": [{"key": "generic_key", "value": "all",
	    "rate_limit": {"unit": "hour", "requests_per_unit": ` + fmt.Sprint(n) + `}}]}]}`
}

// TestTwoPluginsInOneVM: two plugins of one VM keep their buckets apart by
// their domains (they share the slot table of their shared-data prefix).
func TestTwoPluginsInOneVM(t *testing.T) {
	shared, clock := shareddata.New(), newClock()
	h := newFakeHost(shared, clock, "")
	vm := NewVM(h)
	for id, cfg := range map[uint32]string{
		1: pluginConfig("a", 1),
		2: pluginConfig("b", 2),
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
	// Reconfiguring keeps the buckets: same domain, same shared data.
	h.config = []byte(pluginConfig("a", 1))
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
