package wasmfilter

import (
	"strconv"
	"strings"
	"testing"

	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/shareddata"
)

// The example's per-client policy has two bandwidths: both are announced,
// each with its own r and t, and t never exceeds the item's w. Its
// per-api-key policy applies to every request too (no match, key absent:
// one shared bucket).
func TestHeadersAdvertiseEveryBandwidth(t *testing.T) {
	vm := newFakeVM(t, shareddata.New(), newClock(), exampleConfig)
	api := map[string]string{":path": "/api/x"}
	const policy = `"per-client/burst";q=10;w=60, "per-client/hourly";q=200;w=3600, "per-api-key";q=100;w=2`
	for i := range 10 {
		r := vm.do("10.0.0.1:1", api)
		if r.status != 200 {
			t.Fatalf("request %d: %d", i, r.status)
		}
		if got := r.headers["ratelimit-policy"]; got != policy {
			t.Fatalf("RateLimit-Policy %q", got)
		}
		// 10 tokens a minute: 6 s until full after the first request, and
		// with none left 6 s until the next one.
		burstT := itoa(6 * (i + 1))
		if i == 9 {
			burstT = "6"
		}
		want := `"per-client/burst";r=` + itoa(9-i) + `;t=` + burstT + `, "per-client/hourly";r=` + itoa(199-i) + `;t=3600, "per-api-key";r=` + itoa(99-i) + `;t=1`
		if got := r.headers["ratelimit"]; got != want {
			t.Fatalf("request %d: RateLimit %q, want %q", i, got, want)
		}
		if r.headers["x-ratelimit-limit"] != "10" || r.headers["x-ratelimit-remaining"] != itoa(9-i) || r.headers["x-ratelimit-reset"] != burstT {
			t.Fatalf("request %d: x-ratelimit %v", i, r.headers)
		}
	}
	r := vm.do("10.0.0.1:1", api)
	if r.status != 429 || r.headers["retry-after"] != "6" {
		t.Fatalf("11th: %d %v", r.status, r.headers)
	}
	if got := r.headers["ratelimit"]; got != `"per-client/burst";r=0;t=6, "per-client/hourly";r=190;t=3600` {
		t.Fatalf("11th: RateLimit %q", got)
	}
	if r.body != `{"error": "rate limit exceeded"}`+"\n" || r.headers["content-type"] != "application/json" {
		t.Fatalf("11th: body %q type %q", r.body, r.headers["content-type"])
	}
}

// With a cost above 1 the headers count requests, not tokens: a 429 says
// r=0 even when a token or two are left, and q is what a client can send.
func TestHeadersCountRequestsOfTheCost(t *testing.T) {
	cfg := `{"policies": [{"name": "p", "cost": 3, "bandwidths": [{"capacity": 10, "period": "10s"}]}],
	  "headers": {"ietf": true, "x_ratelimit": true}}`
	vm := newFakeVM(t, shareddata.New(), newClock(), cfg)
	for i, want := range []string{`"p";r=2;t=3`, `"p";r=1;t=6`, `"p";r=0;t=2`} {
		r := vm.do("", nil)
		if r.status != 200 || r.headers["ratelimit"] != want || r.headers["ratelimit-policy"] != `"p";q=3;w=10` {
			t.Fatalf("request %d: %d %v, want RateLimit %s", i, r.status, r.headers, want)
		}
	}
	r := vm.do("", nil) // 1 token left, 3 needed
	if r.status != 429 || r.headers["ratelimit"] != `"p";r=0;t=2` || r.headers["x-ratelimit-remaining"] != "0" ||
		r.headers["retry-after"] != "2" {
		t.Fatalf("429: %d %v", r.status, r.headers)
	}
}

func TestDefaultDenyBody(t *testing.T) {
	vm := newFakeVM(t, shareddata.New(), newClock(),
		`{"policies": [{"name": "p", "bandwidths": [{"capacity": 1, "period": "1h"}]}]}`)
	vm.do("", nil)
	r := vm.do("", nil)
	if r.status != 429 || r.body != "rate limit exceeded\n" || r.headers["content-type"] != "text/plain" {
		t.Fatalf("%d %q %v", r.status, r.body, r.headers)
	}
	if _, ok := r.headers["ratelimit"]; ok {
		t.Fatal("headers not configured but sent")
	}
	if strings.Count(DefaultDenyBody, "\n") != 1 || !strings.HasSuffix(DefaultDenyBody, "\n") {
		t.Fatal("DefaultDenyBody changed: update the README")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// On every 429, x-ratelimit-reset and Retry-After are decided by one
// bandwidth, whichever bandwidths the bucket has and however long each
// waits: a client never reads "1 s" next to "retry after an hour".
func TestRefusalHeadersAgree(t *testing.T) {
	periods := []string{"1s", "10s", "1m", "1h"}
	refusals := 0
	for a := range periods {
		for b := range periods {
			for _, caps := range [][2]int{{1, 1}, {1, 3}, {3, 1}, {2, 5}} {
				cfg := `{"headers": {"x_ratelimit": true}, "policies": [
				  {"name": "first", "bandwidths": [{"capacity": 100, "period": "1s"}]},
				  {"name": "p", "bandwidths": [
				    {"id": "a", "capacity": ` + itoa(caps[0]) + `, "refill_tokens": 1, "period": "` + periods[a] + `"},
				    {"id": "b", "capacity": ` + itoa(caps[1]) + `, "refill_tokens": 1, "period": "` + periods[b] + `"}]}]}`
				clk := newClock()
				vm := newFakeVM(t, shareddata.New(), clk, cfg)
				for i := range 12 {
					r := vm.do("", nil)
					if r.status == 429 {
						refusals++
						if ra, reset := r.headers["retry-after"], r.headers["x-ratelimit-reset"]; ra != reset || r.headers["x-ratelimit-remaining"] != "0" {
							t.Fatalf("%s/%d %s/%d, request %d: retry-after %s, x-ratelimit %v",
								periods[a], caps[0], periods[b], caps[1], i, ra, r.headers)
						}
					}
					clk.Add(int64(i%3) * 700e6)
				}
			}
		}
	}
	if refusals == 0 {
		t.Fatal("no request refused: the test tested nothing")
	}
}
