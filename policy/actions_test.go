package policy

import (
	"slices"
	"testing"
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
	path := func(kind MatchKind, v string) HeaderMatcher {
		return HeaderMatcher{Name: ":path", Kind: kind, Value: v}
	}
	for _, tc := range []struct {
		name    string
		actions []Action
		attrs   attrs
		want    []Entry // nil: no descriptor
	}{
		{"header", []Action{{Kind: RequestHeaders, Header: "x-key", Key: "key"}}, req, []Entry{{"key", "k1"}}},
		{"absent header drops", []Action{{Kind: RemoteAddress}, {Kind: RequestHeaders, Header: "x-no", Key: "k"}}, req, nil},
		{"empty header drops", []Action{{Kind: RequestHeaders, Header: "empty", Key: "k"}}, req, nil},
		{"skip_if_absent skips the entry", []Action{{Kind: RemoteAddress}, {Kind: RequestHeaders, Header: "x-no", Key: "k", SkipIfAbsent: true}},
			req, []Entry{{"remote_address", "192.0.2.1"}}},
		{"every entry skipped", []Action{{Kind: RequestHeaders, Header: "x-no", Key: "k", SkipIfAbsent: true}}, req, nil},
		{"no address drops", []Action{{Kind: RemoteAddress}}, attrs{}, nil},
		{"generic key", []Action{{Kind: GenericKey, Value: "v"}, {Kind: GenericKey, Key: "g", Value: "w"}}, req,
			[]Entry{{"generic_key", "v"}, {"g", "w"}}},
		{"path prefix", []Action{{Kind: HeaderValueMatch, Value: "api", ExpectMatch: true, Headers: []HeaderMatcher{path(MatchPrefix, "/api/")}}},
			req, []Entry{{"header_match", "api"}}},
		{"no match drops", []Action{{Kind: HeaderValueMatch, Value: "x", ExpectMatch: true, Headers: []HeaderMatcher{path(MatchPrefix, "/admin")}}}, req, nil},
		{"expect_match false", []Action{{Kind: HeaderValueMatch, Key: "k", Value: "x", Headers: []HeaderMatcher{path(MatchPrefix, "/admin")}}},
			req, []Entry{{"k", "x"}}},
		{"every matcher must match", []Action{{Kind: HeaderValueMatch, Value: "x", ExpectMatch: true,
			Headers: []HeaderMatcher{path(MatchSuffix, "/v1"), {Name: ":method", Kind: MatchExact, Value: "GET"}}}}, req, nil},
		{"inverted, case-folded", []Action{{Kind: HeaderValueMatch, Value: "x", ExpectMatch: true,
			Headers: []HeaderMatcher{{Name: ":method", Kind: MatchExact, Value: "get", IgnoreCase: true, Invert: true}, path(MatchContains, "pi/v")}}},
			req, []Entry{{"header_match", "x"}}},
		{"absent header: only present false matches", []Action{{Kind: HeaderValueMatch, Value: "x", ExpectMatch: true,
			Headers: []HeaderMatcher{{Name: "x-no", Kind: MatchPresent, Present: false}}}}, req, []Entry{{"header_match", "x"}}},
		{"absent header does not match exact, even inverted", []Action{{Kind: HeaderValueMatch, Value: "x", ExpectMatch: true,
			Headers: []HeaderMatcher{{Name: "x-no", Kind: MatchExact, Value: "a", Invert: true}}}}, req, nil},
		{"missing as empty", []Action{{Kind: HeaderValueMatch, Value: "x", ExpectMatch: true,
			Headers: []HeaderMatcher{{Name: "x-no", Kind: MatchExact, Value: "a", Invert: true, MissingAsEmpty: true}}}},
			req, []Entry{{"header_match", "x"}}},
	} {
		got, ok := Entries(tc.actions, tc.attrs)
		if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v %v, want %v", tc.name, got, ok, tc.want)
		}
	}
}

// TestPathSeparatedPrefix: the prefix ends where a segment ends, in any
// letter case with IgnoreCase.
func TestPathSeparatedPrefix(t *testing.T) {
	m := HeaderMatcher{Name: ":path", Kind: MatchPathSeparatedPrefix, Value: "/api"}
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
