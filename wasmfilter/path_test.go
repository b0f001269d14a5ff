package wasmfilter

import (
	"strings"
	"testing"

	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/shareddata"
)

func TestNormalizePath(t *testing.T) {
	for _, c := range []struct {
		in, want string
		fold     bool
	}{
		{"/api/x", "/api/x", false},
		{"/", "/", false},
		{"", "", false},
		{"//api/x", "/api/x", false},
		{"/api//x///", "/api/x/", false},
		{"/./api/./x", "/api/x", false},
		{"/api/x/.", "/api/x/", false},
		{"/static/../api/x", "/api/x", false},
		{"/api/x/..", "/api/", false},
		{"/../../api", "/api", false},
		{"/..", "/", false},
		{"/a/b/../../..//c", "/c", false},
		{"/api/x?y=1", "/api/x", false},
		{"/api/x#frag", "/api/x", false},
		{"//api/x?next=/../admin", "/api/x", false},
		{"/%61pi/x", "/api/x", false},
		{"/%2e%2E/api/x", "/api/x", false},
		{"/api/%2e%2e/admin", "/admin", false},
		{"/a%2fb", "/a%2Fb", false},     // an encoded slash is not a separator
		{"/a%zzb", "/a%zzb", false},     // a malformed escape is kept
		{"/a%4", "/a%4", false},         // so is a truncated one
		{"/a%7E%20b", "/a~%20b", false}, // "~" is unreserved, " " is not
		{"/API/X", "/API/X", false},
		{"/API/X", "/api/x", true},
		{"//API/./X/../Y", "/api/y", true},
		{"/%41PI", "/api", true},
		{"*", "*", false},
		{"HTTP://X/Y", "http://x/y", true},
		{"/api/..x/.y", "/api/..x/.y", false}, // dots inside a segment are names
		{"/api;/x", "/api/x", false},          // path parameters are cut off
		{"/api;a=b/x", "/api/x", false},
		{"/api/x;jsessionid=1?q", "/api/x", false},
		{"/static/..;/api/x", "/api/x", false}, // "..;" is ".." upstream
		{"/;x/api", "/api", false},
		{"/api%3Bx/y", "/api%3Bx/y", false}, // an encoded ";" is data
	} {
		if got := normalizePath(c.in, c.fold); got != c.want {
			t.Errorf("normalizePath(%q, fold %v) = %q, want %q", c.in, c.fold, got, c.want)
		}
	}
}

// FuzzNormalizePath checks the properties matching relies on: the result is
// normal (normalising again changes nothing), starts with "/" when the input
// did, and holds no empty, "." or ".." segment.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/a//b/../c", "/%2e%2e/x", "/A/./b?q", "//", "/a%"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, p string, fold bool) {
		n := normalizePath(p, fold)
		if again := normalizePath(n, fold); again != n {
			t.Fatalf("normalizePath(%q) = %q, but that normalises to %q", p, n, again)
		}
		if !strings.HasPrefix(p, "/") {
			return
		}
		if !strings.HasPrefix(n, "/") {
			t.Fatalf("normalizePath(%q) = %q lost the leading slash", p, n)
		}
		for i, seg := range strings.Split(n[1:], "/") {
			last := i == strings.Count(n[1:], "/")
			if seg == "." || seg == ".." || seg == "" && !last {
				t.Fatalf("normalizePath(%q) = %q has segment %q", p, n, seg)
			}
		}
		if strings.ContainsAny(n, "?#;") {
			t.Fatalf("normalizePath(%q) = %q kept a query or a path parameter", p, n)
		}
	})
}

func TestPathsCannotEscapeAPolicy(t *testing.T) {
	cfg := func(extra string) string {
		return `{"policies": [{"name": "api", "match": {"path_prefix": "/api/"}, "key": [":path"],
		  "bandwidths": [{"capacity": 1, "refill_tokens": 1, "period": "1h"}]}]` + extra + `}`
	}
	t.Run("normalized", func(t *testing.T) {
		vm := newFakeVM(t, shareddata.New(), newClock(), cfg(""))
		if r := vm.do("", map[string]string{":path": "/api/x"}); r.status != 200 {
			t.Fatal(r.status)
		}
		for _, p := range []string{"/api/x", "//api/x", "/api//x", "/./api/x", "/static/../api/x", "/%61pi/x", "/api/x?cache=bust", "/api/y/../x",
			"/api;/x", "/api;a=b/x", "/api/x;v=1", "/static/..;/api/x"} {
			if r := vm.do("", map[string]string{":path": p}); r.status != 429 {
				t.Errorf("%s: status %d, want 429 (the same path as /api/x)", p, r.status)
			}
		}
		// Case matters unless ignore_case says otherwise.
		if r := vm.do("", map[string]string{":path": "/API/x"}); r.status != 200 || len(r.headers) != 0 {
			t.Errorf("/API/x: %d %v, want outside the policy", r.status, r.headers)
		}
	})
	t.Run("ignore_case", func(t *testing.T) {
		vm := newFakeVM(t, shareddata.New(), newClock(), cfg(`, "path": {"ignore_case": true}`))
		vm.do("", map[string]string{":path": "/api/x"})
		for _, p := range []string{"/API/x", "/Api/X", "//API/%58"} {
			if r := vm.do("", map[string]string{":path": p}); r.status != 429 {
				t.Errorf("%s: status %d, want 429", p, r.status)
			}
		}
	})
	t.Run("raw", func(t *testing.T) {
		vm := newFakeVM(t, shareddata.New(), newClock(), cfg(`, "path": {"normalize": false}`))
		vm.do("", map[string]string{":path": "/api/x"})
		if r := vm.do("", map[string]string{":path": "/api/x?b"}); r.status != 200 {
			t.Errorf("raw: the query is part of the key: %d", r.status)
		}
		if r := vm.do("", map[string]string{":path": "//api/x"}); r.status != 200 || len(r.headers) != 0 {
			t.Errorf("raw: //api/x matches /api/: %d", r.status)
		}
	})
}
