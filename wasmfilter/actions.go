package wasmfilter

import (
	"strings"

	rules "github.com/bucketgrid/bucketgrid/policy"
)

// actionKind is the kind of one of Envoy's rate-limit actions
// (config.route.v3.RateLimit.Action), each of which appends one entry to a
// descriptor.
type actionKind uint8

// The actions a descriptor is built from.
const (
	// actRequestHeaders appends (Key, the value of Header); an absent or
	// empty header drops the descriptor, or only the entry with
	// SkipIfAbsent.
	actRequestHeaders actionKind = iota + 1
	// actRemoteAddress appends ("remote_address", the client's address); a
	// client without an IP address drops the descriptor.
	actRemoteAddress
	// actGenericKey appends (Key, Value); Key defaults to "generic_key".
	actGenericKey
	// actHeaderValueMatch appends (Key, Value) when every matcher of Headers
	// matches, or with ExpectMatch false when not every one does, and
	// drops the descriptor otherwise; Key defaults to "header_match".
	actHeaderValueMatch
)

// rateLimitAction is one rate-limit action, as Envoy's route configuration states
// it.
type rateLimitAction struct {
	Kind actionKind
	// Key is the descriptor key (descriptor_key).
	Key string
	// Value is the descriptor value of actGenericKey and actHeaderValueMatch
	// (descriptor_value).
	Value string
	// Header is actRequestHeaders' header_name, lower case.
	Header string
	// SkipIfAbsent is actRequestHeaders' skip_if_absent.
	SkipIfAbsent bool
	// ExpectMatch is actHeaderValueMatch's expect_match (true in Envoy's
	// default).
	ExpectMatch bool
	// Headers are actHeaderValueMatch's matchers.
	Headers []headerMatcher
}

// matchKind is how a headerMatcher compares a header's value.
type matchKind uint8

// The matches of Envoy's headerMatcher this package implements (exact,
// prefix, suffix, contains and present, directly or as string_match), and
// matchPathSeparatedPrefix.
const (
	matchExact matchKind = iota + 1
	matchPrefix
	matchSuffix
	matchContains
	matchPresent
	// matchPathSeparatedPrefix matches Value itself and Value followed by
	// "/" or "?": a prefix that ends where a path segment ends, so "/api"
	// matches "/api", "/api/x" and "/api?q" but not "/apix". It is the rule
	// of Envoy's route match path_separated_prefix; Envoy's header matchers
	// have no such match.
	matchPathSeparatedPrefix
)

// headerMatcher is one of Envoy's header matchers (config.route.v3.HeaderMatcher).
type headerMatcher struct {
	// Name is the header, lower case; pseudo-headers (":path",
	// ":method", ":authority") as Envoy names them.
	Name string
	Kind matchKind
	// Value is what Exact, Prefix, Suffix and Contains compare with.
	Value string
	// Present is what matchPresent wants: the header present (true) or
	// absent (false).
	Present bool
	// IgnoreCase compares Value without regard to ASCII case (string_match).
	IgnoreCase bool
	// Invert inverts the result (invert_match).
	Invert bool
	// MissingAsEmpty treats an absent header as an empty one
	// (treat_missing_header_as_empty).
	MissingAsEmpty bool
}

// requestAttributes are the request values actions read.
type requestAttributes interface {
	// Header returns the request header name (lower case, or a
	// pseudo-header) and whether the request has it.
	Header(name string) (string, bool)
	// actRemoteAddress returns the client's IP address, without a port, and
	// false when the client has none (a Unix socket).
	RemoteAddress() (string, bool)
}

// entriesOf builds the descriptor a rate_limits entry of actions builds for
// a request with attributes a, as Envoy's rate-limit filter builds it: the
// actions' entries in order, and false when an action drops the descriptor
// (Envoy then sends no descriptor for the entry).
func entriesOf(actions []rateLimitAction, a requestAttributes) ([]rules.Entry, bool) {
	entries := make([]rules.Entry, 0, len(actions))
	for i := range actions {
		act := &actions[i]
		switch act.Kind {
		case actRequestHeaders:
			v, ok := a.Header(act.Header)
			if !ok || v == "" {
				if act.SkipIfAbsent {
					continue
				}
				return nil, false
			}
			entries = append(entries, rules.Entry{Key: act.Key, Value: v})
		case actRemoteAddress:
			v, ok := a.RemoteAddress()
			if !ok {
				return nil, false
			}
			entries = append(entries, rules.Entry{Key: "remote_address", Value: v})
		case actGenericKey:
			entries = append(entries, rules.Entry{Key: keyOr(act.Key, "generic_key"), Value: act.Value})
		case actHeaderValueMatch:
			if matchAll(act.Headers, a) != act.ExpectMatch {
				return nil, false
			}
			entries = append(entries, rules.Entry{Key: keyOr(act.Key, "header_match"), Value: act.Value})
		default:
			return nil, false
		}
	}
	return entries, len(entries) > 0
}

func keyOr(k, def string) string {
	if k == "" {
		return def
	}
	return k
}

// matchAll reports whether every matcher of ms matches, as Envoy's
// HeaderUtility::matchHeaders decides.
func matchAll(ms []headerMatcher, a requestAttributes) bool {
	for i := range ms {
		if !ms[i].matches(a) {
			return false
		}
	}
	return true
}

func (m *headerMatcher) matches(a requestAttributes) bool {
	v, ok := a.Header(m.Name)
	if !ok {
		if !m.MissingAsEmpty {
			// an absent header matches only "present: false", or an
			// inverted "present: true"
			return m.Kind == matchPresent && m.Present == m.Invert
		}
		v = ""
	}
	var match bool
	switch m.Kind {
	case matchPresent:
		match = m.Present
	case matchExact:
		match = v == m.Value || m.IgnoreCase && strings.EqualFold(v, m.Value)
	case matchPrefix, matchPathSeparatedPrefix:
		n := len(m.Value)
		match = len(v) >= n && equal(v[:n], m.Value, m.IgnoreCase)
		if match && m.Kind == matchPathSeparatedPrefix && len(v) > n {
			match = v[n] == '/' || v[n] == '?'
		}
	case matchSuffix:
		match = len(v) >= len(m.Value) && equal(v[len(v)-len(m.Value):], m.Value, m.IgnoreCase)
	case matchContains:
		if m.IgnoreCase {
			match = strings.Contains(strings.ToLower(v), strings.ToLower(m.Value))
		} else {
			match = strings.Contains(v, m.Value)
		}
	}
	return match != m.Invert
}

func equal(a, b string, foldCase bool) bool {
	return a == b || foldCase && strings.EqualFold(a, b)
}
