package wasmfilter_test

import (
	"os"
	"testing"

	"gopkg.in/yaml.v3"
)

// examplePluginConfig returns the plugin configuration of
// examples/envoy/envoy.yaml: the rule file users start from.
func examplePluginConfig(t testing.TB) string {
	t.Helper()
	raw, err := os.ReadFile("../examples/envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		StaticResources struct {
			Listeners []struct {
				FilterChains []struct {
					Filters []struct {
						TypedConfig struct {
							HTTPFilters []struct {
								Name        string `yaml:"name"`
								TypedConfig struct {
									Config struct {
										Configuration struct {
											Value string `yaml:"value"`
										} `yaml:"configuration"`
									} `yaml:"config"`
								} `yaml:"typed_config"`
							} `yaml:"http_filters"`
						} `yaml:"typed_config"`
					} `yaml:"filters"`
				} `yaml:"filter_chains"`
			} `yaml:"listeners"`
		} `yaml:"static_resources"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, f := range doc.StaticResources.Listeners[0].FilterChains[0].Filters[0].TypedConfig.HTTPFilters {
		if f.Name == "envoy.filters.http.wasm" {
			return f.TypedConfig.Config.Configuration.Value
		}
	}
	t.Fatal("no wasm filter in examples/envoy/envoy.yaml")
	return ""
}

// Spellings of /api/x, and of paths under /api, that an upstream serves
// under /api: an RFC 3986
// upstream (query, escaped unreserved characters, dot segments) that also
// cuts ";" parameters off each segment as Tomcat, Jetty and Spring do, or
// merges slashes as Envoy's merge_slashes and nginx do.
var sameAsAPIX = []string{
	"/api/x", "/api;/x", "/api;a=b/x", "/api/x;v=1", "/api;jsessionid=1/x;v=2", "/;/api/x",
	"/api/x?cache=bust", "/api/x?", "/%61pi/x", "/%61%70%69/%78", "/ap%69/x", "//api/x", "/api//x",
	"/api///x", "/static/../api/x", "/api/./x", "/./api/x", "/api/y/../x", "/../api/x", "/api/x/.",
}

// Spellings the filter refuses (400) because upstreams disagree on the
// resource they name: an escaped or backslash separator, a dot segment
// spelled with escapes or ";" parameters, ".." after an empty segment
// (RFC 3986 and slash-merging upstreams resolve it differently), malformed
// escapes, characters no request-target holds.
var ambiguousPaths = []string{
	"/api%2Fx", "/api%2fx", "/api%5Cx", "/api%5cx", "/api\\x", "/x/..;/api/x", "/x/..;a=b/api/x",
	"/x/%2e%2e/api/x", "/x/.%2E/api/x", "/api/%2e/x", "/api/.;/x", "/x//../api/x", "/x/;/../api/x",
	"/api/x%", "/api/x%2", "/api/x%zz", "/api/x#f", "/api /x", "/api\x00/x", "/api\t/x", "api/x",
}

// TestWasmExamplePathSpellings: with the shipped example's rule file, a
// client spent on /api/x is refused on every spelling an upstream serves as
// /api/x, and a fresh client cycling through those spellings gets exactly
// its burst of 10; a spelling upstreams read differently is refused (400)
// for every client, spent or not; /apix is another path.
func TestWasmExamplePathSpellings(t *testing.T) {
	e := newEnvoy(t)
	w, ok := e.newWorker(examplePluginConfig(t))
	if !ok {
		t.Fatalf("configure refused: %q", w.logs)
	}
	const spent, fresh, other = "10.0.0.1:4000", "10.0.0.2:4000", "10.0.0.3:4000"
	for i := 0; ; i++ {
		if r := w.do(spent, map[string]string{":path": "/api/x"}); r.status == 429 {
			break
		} else if r.status != 200 || i == 10 {
			t.Fatalf("request %d on /api/x: status %d", i+1, r.status)
		}
	}
	for _, p := range sameAsAPIX {
		if r := w.do(spent, map[string]string{":path": p}); r.status != 429 {
			t.Errorf("%q after /api/x was refused: status %d, want 429", p, r.status)
		}
	}
	admitted := 0
	for i := 0; i < 3*len(sameAsAPIX); i++ {
		switch r := w.do(fresh, map[string]string{":path": sameAsAPIX[i%len(sameAsAPIX)]}); r.status {
		case 200:
			admitted++
		case 429:
		default:
			t.Fatalf("%q: status %d", sameAsAPIX[i%len(sameAsAPIX)], r.status)
		}
	}
	if admitted != 10 {
		t.Errorf("a fresh client cycling through %d spellings of /api/x got %d requests in, want 10 (the burst)",
			len(sameAsAPIX), admitted)
	}
	for _, p := range ambiguousPaths {
		for _, c := range []string{spent, other} {
			if r := w.do(c, map[string]string{":path": p}); r.status != 400 || r.details != "bucketgrid_ambiguous_path" {
				t.Errorf("%q from %s: status %d %q, want 400 bucketgrid_ambiguous_path", p, c, r.status, r.details)
			}
		}
	}
	if n := e.metric("rules", "invalid_path"); n != uint64(2*len(ambiguousPaths)) {
		t.Errorf("invalid_path %d, want %d", n, 2*len(ambiguousPaths))
	}
	// "/api" is the limited prefix itself; "/apix" and "/api.json" are
	// other paths, limited by nothing here.
	if r := w.do(spent, map[string]string{":path": "/api"}); r.status != 429 {
		t.Errorf("/api after /api/x was refused: status %d, want 429", r.status)
	}
	for _, p := range []string{"/apix", "/api.json", "/ap", "/"} {
		if r := w.do(spent, map[string]string{":path": p}); r.status != 200 {
			t.Errorf("%q: status %d, want 200 (not under /api)", p, r.status)
		}
	}
}
