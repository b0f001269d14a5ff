package wasmfilter

import (
	"slices"
	"testing"

	rules "github.com/bucketgrid/bucketgrid/policy"
)

type attrs struct {
	headers map[string]string
	addr    string
}

func (a attrs) Header(name string) (string, bool) { v, ok := a.headers[name]; return v, ok }
func (a attrs) RemoteAddress() (string, bool)     { return a.addr, a.addr != "" }

// TestEntries builds descriptors as Envoy's rate-limit actions build them.
func TestEntries(t *testing.T) {
	req := attrs{headers: map[string]string{":path": "/api/v1", ":method": "POST", "x-key": "k1", "empty": ""},
		addr: "192.0.2.1"}
	path := func(kind matchKind, v string) headerMatcher {
		return headerMatcher{Name: ":path", Kind: kind, Value: v}
	}
	for _, tc := range []struct {
		name    string
		actions []rateLimitAction
		attrs   attrs
		want    []rules.Entry // nil: no descriptor
	}{
		{"header", []rateLimitAction{{Kind: actRequestHeaders, Header: "x-key", Key: "key"}}, req, []rules.Entry{{Key: "key", Value: "k1"}}},
		{"absent header drops", []rateLimitAction{{Kind: actRemoteAddress}, {Kind: actRequestHeaders, Header: "x-no", Key: "k"}}, req, nil},
		{"empty header drops", []rateLimitAction{{Kind: actRequestHeaders, Header: "empty", Key: "k"}}, req, nil},
		{"skip_if_absent skips the entry", []rateLimitAction{{Kind: actRemoteAddress}, {Kind: actRequestHeaders, Header: "x-no", Key: "k", SkipIfAbsent: true}},
			req, []rules.Entry{{Key: "remote_address", Value: "192.0.2.1"}}},
		{"every entry skipped", []rateLimitAction{{Kind: actRequestHeaders, Header: "x-no", Key: "k", SkipIfAbsent: true}}, req, nil},
		{"no address drops", []rateLimitAction{{Kind: actRemoteAddress}}, attrs{}, nil},
		{"generic key", []rateLimitAction{{Kind: actGenericKey, Value: "v"}, {Kind: actGenericKey, Key: "g", Value: "w"}}, req,
			[]rules.Entry{{Key: "generic_key", Value: "v"}, {Key: "g", Value: "w"}}},
		{"path prefix", []rateLimitAction{{Kind: actHeaderValueMatch, Value: "api", ExpectMatch: true, Headers: []headerMatcher{path(matchPrefix, "/api/")}}},
			req, []rules.Entry{{Key: "header_match", Value: "api"}}},
		{"no match drops", []rateLimitAction{{Kind: actHeaderValueMatch, Value: "x", ExpectMatch: true, Headers: []headerMatcher{path(matchPrefix, "/admin")}}}, req, nil},
		{"expect_match false", []rateLimitAction{{Kind: actHeaderValueMatch, Key: "k", Value: "x", Headers: []headerMatcher{path(matchPrefix, "/admin")}}},
			req, []rules.Entry{{Key: "k", Value: "x"}}},
		{"every matcher must match", []rateLimitAction{{Kind: actHeaderValueMatch, Value: "x", ExpectMatch: true,
			Headers: []headerMatcher{path(matchSuffix, "/v1"), {Name: ":method", Kind: matchExact, Value: "GET"}}}}, req, nil},
		{"inverted, case-folded", []rateLimitAction{{Kind: actHeaderValueMatch, Value: "x", ExpectMatch: true,
			Headers: []headerMatcher{{Name: ":method", Kind: matchExact, Value: "get", IgnoreCase: true, Invert: true}, path(matchContains, "pi/v")}}},
			req, []rules.Entry{{Key: "header_match", Value: "x"}}},
		{"absent header: only present false matches", []rateLimitAction{{Kind: actHeaderValueMatch, Value: "x", ExpectMatch: true,
			Headers: []headerMatcher{{Name: "x-no", Kind: matchPresent, Present: false}}}}, req, []rules.Entry{{Key: "header_match", Value: "x"}}},
		{"absent header does not match exact, even inverted", []rateLimitAction{{Kind: actHeaderValueMatch, Value: "x", ExpectMatch: true,
			Headers: []headerMatcher{{Name: "x-no", Kind: matchExact, Value: "a", Invert: true}}}}, req, nil},
		{"missing as empty", []rateLimitAction{{Kind: actHeaderValueMatch, Value: "x", ExpectMatch: true,
			Headers: []headerMatcher{{Name: "x-no", Kind: matchExact, Value: "a", Invert: true, MissingAsEmpty: true}}}},
			req, []rules.Entry{{Key: "header_match", Value: "x"}}},
	} {
		got, ok := entriesOf(tc.actions, tc.attrs)
		if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v %v, want %v", tc.name, got, ok, tc.want)
		}
	}
}

// TestPathSeparatedPrefix: the prefix ends where a segment ends, in any
// letter case with IgnoreCase.
func TestMatchPathSeparatedPrefix(t *testing.T) {
	m := headerMatcher{Name: ":path", Kind: matchPathSeparatedPrefix, Value: "/api"}
	folded := m
	folded.IgnoreCase = true
	for path, want := range map[string][2]bool{
		"/api": {true, true}, "/api/": {true, true}, "/api/x": {true, true}, "/api?q=1": {true, true},
		"/apix": {false, false}, "/api.json": {false, false}, "/ap": {false, false}, "/x/api": {false, false},
		"/API/x": {false, true}, "/Api": {false, true},
	} {
		a := attrs{headers: map[string]string{":path": path}}
		if got := [2]bool{m.matches(a), folded.matches(a)}; got != want {
			t.Errorf("%q: match %v, with ignore_case %v; want %v", path, got[0], got[1], want)
		}
	}
}
