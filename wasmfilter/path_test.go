package wasmfilter

import (
	"strings"
	"testing"

	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/shareddata"
)

// pathConfig limits every request whose :path matches matcher (a header
// matcher's members after "name") to 0 requests: each request the
// matcher counts is refused (429), each it does not is admitted (200).
func pathConfig(matcher, extra string) string {
	return `{"domain": "d", "rate_limits": [{"actions": [
	  {"header_value_match": {"descriptor_value": "p", "headers": [{"name": ":path", ` + matcher + `}]}}]}],
	  "rules": [{"domain": "d", "descriptors": [{"key": "header_match", "value": "p",
	    "rate_limit": {"unit": "hour", "requests_per_unit": 0}}]}]` + extra + `}`
}

// TestPathSeparatedPrefix: path_separated_prefix "/api" counts /api and
// everything under it, in any spelling, and not /apix; a prefix_match
// "/api" counts /apix too.
func TestPathSeparatedPrefix(t *testing.T) {
	sep := newFakeVM(t, shareddata.New(), newClock(), pathConfig(`"path_separated_prefix": "/api"`, ""))
	plain := newFakeVM(t, shareddata.New(), newClock(), pathConfig(`"prefix_match": "/api"`, ""))
	for _, p := range []string{"/api", "/api/", "/api/x", "/api?q", "/api;v=1", "/;/api/x", "//api", "/x/../api"} {
		if r := sep.do("", map[string]string{":path": p}); r.status != 429 {
			t.Errorf("path_separated_prefix /api, %q: status %d, want 429", p, r.status)
		}
	}
	for _, p := range []string{"/apix", "/api.json", "/ap", "/", "/x/api"} {
		if r := sep.do("", map[string]string{":path": p}); r.status != 200 {
			t.Errorf("path_separated_prefix /api, %q: status %d, want 200", p, r.status)
		}
	}
	if r := plain.do("", map[string]string{":path": "/apix"}); r.status != 429 {
		t.Errorf("prefix_match /api, /apix: status %d, want 429 (a string prefix)", r.status)
	}
}

// TestRawPath: with raw_path the matchers see :path as Envoy passes it, as
// Envoy's own rate-limit actions do: ";" parameters, escapes, dot segments
// and the query are part of it, and nothing is refused.
func TestRawPath(t *testing.T) {
	vm := newFakeVM(t, shareddata.New(), newClock(), pathConfig(`"prefix_match": "/api/"`, `, "raw_path": true`))
	for p, want := range map[string]int{"/api/x": 429, "/api;/x": 200, "/%61pi/x": 200, "/x/../api/x": 200,
		"/api%2Fx": 200, "/api/x?q": 429, "/api/x#f": 429} {
		if r := vm.do("", map[string]string{":path": p}); r.status != want {
			t.Errorf("raw_path, %q: status %d, want %d", p, r.status, want)
		}
	}
}

// TestPathMatcherValuesMustBeNormal: a :path matcher value normalisation
// would change can never match a normalised path; it is refused with the
// form that would.
func TestPathMatcherValuesMustBeNormal(t *testing.T) {
	for matcher, want := range map[string]string{
		`"prefix_match": "/api;v=1/"`:       `/api/ would`,
		`"exact_match": "/%61pi"`:           `/api would`,
		`"prefix_match": "/a/../api/"`:      `/api/ would`,
		`"exact_match": "/api?x=1"`:         `/api would`,
		`"exact_match": "/a%2Fb"`:           "refuses it as ambiguous",
		`"path_separated_prefix": "/api/"`:  "without its final",
		`"path_separated_prefix": "api"`:    "starts with",
		`"string_match": {"prefix": "//a"}`: `/a would`,
	} {
		_, err := ParseConfig([]byte(pathConfig(matcher, "")))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %s", matcher, err, want)
		}
	}
	for _, matcher := range []string{`"suffix_match": "/.."`, `"contains_match": ";"`, `"prefix_match": ""`} {
		if _, err := ParseConfig([]byte(pathConfig(matcher, ""))); err != nil {
			t.Errorf("%s: %v", matcher, err)
		}
	}
	other := strings.Replace(pathConfig(`"path_separated_prefix": "/api"`, ""), `":path"`, `"x-path"`, 1)
	if _, err := ParseConfig([]byte(other)); err == nil || !strings.Contains(err.Error(), ":path") {
		t.Errorf("path_separated_prefix on another header: error %v", err)
	}
}

// TestNormalPathDoesNotAllocate: a path already in normal form, the usual
// request, costs the filter no allocation.
func TestNormalPathDoesNotAllocate(t *testing.T) {
	for _, p := range []string{"/api/v1/users/123", "/", "/api/x/", "/api/x?q=1"} {
		if n := testing.AllocsPerRun(100, func() {
			if _, ok := normalizePath(p); !ok {
				t.Fatal(p)
			}
		}); n != 0 {
			t.Errorf("%q: %v allocations", p, n)
		}
	}
}
