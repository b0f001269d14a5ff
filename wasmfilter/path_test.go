package wasmfilter

import (
	"testing"

	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/shareddata"
)

// TestPathPrefixes: the filter matches :path as Envoy passes it, as Envoy's
// rate-limit actions do; Envoy's connection manager normalises it first
// (normalize_path, merge_slashes, path_with_escaped_slashes_action), and
// keeps ";" path parameters and the query. A prefix_match without its
// final slash counts the forms an upstream reads as the same path
// ("/api;/x", "/api;a=b/x" for "/api/x") in one limit, and a prefix with
// the slash leaves them out: the documented choice the rule writer makes.
func TestPathPrefixes(t *testing.T) {
	cfg := func(prefix string) string {
		return `{"domain": "d", "rate_limits": [{"actions": [
		  {"header_value_match": {"descriptor_value": "api", "headers": [{"name": ":path", "prefix_match": "` + prefix + `"}]}}]}],
		  "rules": [{"domain": "d", "descriptors": [{"key": "header_match", "value": "api",
		    "rate_limit": {"unit": "hour", "requests_per_unit": 1}}]}]}`
	}
	counted := []string{"/api/x", "/api;/x", "/api;a=b/x", "/api/x;v=1", "/api/x?cache=bust", "/api"}
	t.Run("without the slash", func(t *testing.T) {
		vm := newFakeVM(t, shareddata.New(), newClock(), cfg("/api"))
		if r := vm.do("", map[string]string{":path": "/api/x"}); r.status != 200 {
			t.Fatal(r.status)
		}
		for _, p := range counted {
			if r := vm.do("", map[string]string{":path": p}); r.status != 429 {
				t.Errorf("%s: status %d, want 429 (counted with /api/x)", p, r.status)
			}
		}
		// Envoy's normalize_path and merge_slashes turn these into /api/x
		// before the filter runs; unnormalised, they are other paths.
		for _, p := range []string{"//api/x", "/%61pi/x", "/API/x", "/static/../api/x"} {
			if r := vm.do("", map[string]string{":path": p}); r.status != 200 {
				t.Errorf("%s: status %d, want 200 (outside the prefix until Envoy normalises it)", p, r.status)
			}
		}
	})
	t.Run("with the slash", func(t *testing.T) {
		vm := newFakeVM(t, shareddata.New(), newClock(), cfg("/api/"))
		vm.do("", map[string]string{":path": "/api/x"})
		for _, p := range []string{"/api;/x", "/api;a=b/x", "/api"} {
			if r := vm.do("", map[string]string{":path": p}); r.status != 200 {
				t.Errorf("%s: status %d, want 200 (outside \"/api/\")", p, r.status)
			}
		}
	})
}
