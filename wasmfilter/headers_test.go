package wasmfilter

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/shareddata"
)

// exampleConfig returns the plugin configuration of
// examples/envoy/envoy.yaml: the block under its "value: |".
func exampleConfig(t testing.TB) string {
	t.Helper()
	raw, err := os.ReadFile("../examples/envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(raw), "value: |\n")
	if !ok {
		t.Fatal("envoy.yaml: no configuration value")
	}
	var b strings.Builder
	indent := ""
	for _, line := range strings.Split(block, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if indent == "" {
			indent = line[:len(line)-len(trimmed)]
		}
		if !strings.HasPrefix(line, indent) {
			break
		}
		b.WriteString(line[len(indent):] + "\n")
	}
	return b.String()
}

// The example's client has two limits (burst and hourly), each a
// descriptor: both are announced, each with its own r and t, and the
// burst refuses the 11th request. The per-api-key limit applies only to
// requests that carry the header.
func TestHeadersAdvertiseEveryLimit(t *testing.T) {
	vm := newFakeVM(t, shareddata.New(), newClock(), exampleConfig(t))
	api := map[string]string{":path": "/api/x", "x-api-key": "k"}
	const policy = `"per-client/burst";q=10;w=60, "per-client/hourly";q=200;w=3600, "per-api-key";q=100;w=2`
	for i := range 10 {
		r := vm.do("10.0.0.1:1", api)
		if r.status != 200 {
			t.Fatalf("request %d: %d", i, r.status)
		}
		if got := r.headers["ratelimit-policy"]; got != policy {
			t.Fatalf("RateLimit-Policy %q", got)
		}
		// 10 tokens a minute: 6 s a token until the burst is full again.
		burstT := itoa(6 * (i + 1))
		if got, want := r.headers["ratelimit"], `"per-client/burst";r=`+itoa(9-i)+`;t=`+burstT; !strings.HasPrefix(got, want) {
			t.Fatalf("request %d: RateLimit %q, want %s…", i, got, want)
		}
		if !strings.Contains(r.headers["ratelimit"], `"per-client/hourly";r=`+itoa(199-i)+`;`) ||
			!strings.Contains(r.headers["ratelimit"], `"per-api-key";r=`+itoa(99-i)+`;`) {
			t.Fatalf("request %d: RateLimit %q", i, r.headers["ratelimit"])
		}
	}
	r := vm.do("10.0.0.1:1", api)
	if r.status != 429 || r.headers["retry-after"] != "6" || r.headers["x-ratelimit-limit"] != "10" || r.headers["x-ratelimit-remaining"] != "0" {
		t.Fatalf("11th: %d %v", r.status, r.headers)
	}
	if r.body != `{"error": "rate limit exceeded"}`+"\n" || r.headers["content-type"] != "application/json" {
		t.Fatalf("11th: body %q type %q", r.body, r.headers["content-type"])
	}
	r = vm.do("10.0.0.2:1", map[string]string{":path": "/api/x"})
	if got := r.headers["ratelimit-policy"]; r.status != 200 || strings.Contains(got, "per-api-key") {
		t.Fatalf("without x-api-key: %d %q, want the per-client limits only", r.status, got)
	}
}

func TestDefaultDenyBody(t *testing.T) {
	vm := newFakeVM(t, shareddata.New(), newClock(), perAddress(`{"unit": "hour", "requests_per_unit": 1}`, ""))
	vm.do("10.0.0.1:1", nil)
	r := vm.do("10.0.0.1:1", nil)
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

// On a 429 of one fixed window, x-ratelimit-reset and Retry-After are
// decided by the limit that refused: a client never reads "1 s" next to
// "retry after an hour", whatever other limit took part and whatever the
// units.
func TestRefusalHeadersAgree(t *testing.T) {
	units := []string{"second", "minute", "hour", "day"}
	refusals := 0
	for _, a := range units {
		for _, b := range units {
			for _, n := range [][2]int{{1, 100}, {3, 100}, {100, 2}} {
				cfg := `{"domain": "d", "headers": {"x_ratelimit": true},
				  "rate_limits": [{"actions": [{"generic_key": {"descriptor_value": "a"}}]}, {"actions": [{"generic_key": {"descriptor_value": "b"}}]}],
				  "rules": [{"domain": "d", "descriptors": [
				    {"key": "generic_key", "value": "a", "rate_limit": {"unit": "` + a + `", "requests_per_unit": ` + itoa(n[0]) + `}},
				    {"key": "generic_key", "value": "b", "rate_limit": {"unit": "` + b + `", "requests_per_unit": ` + itoa(n[1]) + `}}]}]}`
				clk := newClock()
				vm := newFakeVM(t, shareddata.New(), clk, cfg)
				for i := range 8 {
					r := vm.do("", nil)
					if r.status == 429 {
						refusals++
						if ra, reset := r.headers["retry-after"], r.headers["x-ratelimit-reset"]; ra != reset || r.headers["x-ratelimit-remaining"] != "0" {
							t.Fatalf("%s/%d %s/%d, request %d: retry-after %s, x-ratelimit %v", a, n[0], b, n[1], i, ra, r.headers)
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
