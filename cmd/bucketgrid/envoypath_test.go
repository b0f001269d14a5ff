package main

import (
	"regexp"
	"testing"
)

// The matcher shapes the README ("Paths in front of the service") gives
// service users, as Envoy's RE2 reads them: a safe_regex matches the whole
// value. The route regex sees the path without its query, the header
// matcher :path with it.
const (
	envoyParamsRoute = `.*;.*`
	envoyAPIHeader   = `/api([/?].*)?`
)

func fullMatch(t *testing.T, re string) *regexp.Regexp {
	t.Helper()
	return regexp.MustCompile(`^(?:` + re + `)$`)
}

// TestEnvoyPathShapes: the route regex catches every path holding ";" and
// no other, and the header regex counts /api and what lies under it, with
// or without a query, and not /apix.
func TestEnvoyPathShapes(t *testing.T) {
	params := fullMatch(t, envoyParamsRoute)
	for p, want := range map[string]bool{"/api;/x": true, "/x/..;/api/x": true, "/;/api": true, "/api/x;v=1": true,
		"/api/x": false, "/": false, "/api%3Bx": false} {
		if params.MatchString(p) != want {
			t.Errorf("route regex %q on %q: %v, want %v", envoyParamsRoute, p, !want, want)
		}
	}
	api := fullMatch(t, envoyAPIHeader)
	for p, want := range map[string]bool{"/api": true, "/api/": true, "/api/x": true, "/api?q=1": true, "/api/x?q=/y": true,
		"/apix": false, "/api.json": false, "/ap": false, "/x/api": false, "/x?/api": false, "/apix?/api/": false} {
		if api.MatchString(p) != want {
			t.Errorf("header regex %q on %q: %v, want %v", envoyAPIHeader, p, !want, want)
		}
	}
}
