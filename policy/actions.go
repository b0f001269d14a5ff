package policy

import "strings"

// ActionKind is the kind of one of Envoy's rate-limit actions
// (config.route.v3.RateLimit.Action), each of which appends one entry to a
// descriptor.
type ActionKind uint8

// The actions a descriptor is built from.
const (
	// RequestHeaders appends (Key, the value of Header); an absent or
	// empty header drops the descriptor, or only the entry with
	// SkipIfAbsent.
	RequestHeaders ActionKind = iota + 1
	// RemoteAddress appends ("remote_address", the client's address); a
	// client without an IP address drops the descriptor.
	RemoteAddress
	// GenericKey appends (Key, Value); Key defaults to "generic_key".
	GenericKey
	// HeaderValueMatch appends (Key, Value) when every matcher of Headers
	// matches, or with ExpectMatch false when not every one does, and
	// drops the descriptor otherwise; Key defaults to "header_match".
	HeaderValueMatch
)

// Action is one rate-limit action, as Envoy's route configuration states
// it.
type Action struct {
	Kind ActionKind
	// Key is the descriptor key (descriptor_key).
	Key string
	// Value is the descriptor value of GenericKey and HeaderValueMatch
	// (descriptor_value).
	Value string
	// Header is RequestHeaders' header_name, lower case.
	Header string
	// SkipIfAbsent is RequestHeaders' skip_if_absent.
	SkipIfAbsent bool
	// ExpectMatch is HeaderValueMatch's expect_match (true in Envoy's
	// default).
	ExpectMatch bool
	// Headers are HeaderValueMatch's matchers.
	Headers []HeaderMatcher
}

// MatchKind is how a HeaderMatcher compares a header's value.
type MatchKind uint8

// The matches of Envoy's HeaderMatcher this package implements (exact,
// prefix, suffix, contains and present, directly or as string_match), and
// MatchPathSeparatedPrefix.
const (
	MatchExact MatchKind = iota + 1
	MatchPrefix
	MatchSuffix
	MatchContains
	MatchPresent
	// MatchPathSeparatedPrefix matches Value itself and Value followed by
	// "/" or "?": a prefix that ends where a path segment ends, so "/api"
	// matches "/api", "/api/x" and "/api?q" but not "/apix". It is the rule
	// of Envoy's route match path_separated_prefix; Envoy's header matchers
	// have no such match.
	MatchPathSeparatedPrefix
)

// HeaderMatcher is one of Envoy's header matchers (config.route.v3.HeaderMatcher).
type HeaderMatcher struct {
	// Name is the header, lower case; pseudo-headers (":path",
	// ":method", ":authority") as Envoy names them.
	Name string
	Kind MatchKind
	// Value is what Exact, Prefix, Suffix and Contains compare with.
	Value string
	// Present is what MatchPresent wants: the header present (true) or
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

// Attributes are the request values actions read.
type Attributes interface {
	// Header returns the request header name (lower case, or a
	// pseudo-header) and whether the request has it.
	Header(name string) (string, bool)
	// RemoteAddress returns the client's IP address, without a port, and
	// false when the client has none (a Unix socket).
	RemoteAddress() (string, bool)
}

// Entries builds the descriptor a rate_limits entry of actions builds for
// a request with attributes a, as Envoy's rate-limit filter builds it: the
// actions' entries in order, and false when an action drops the descriptor
// (Envoy then sends no descriptor for the entry).
func Entries(actions []Action, a Attributes) ([]Entry, bool) {
	entries := make([]Entry, 0, len(actions))
	for i := range actions {
		act := &actions[i]
		switch act.Kind {
		case RequestHeaders:
			v, ok := a.Header(act.Header)
			if !ok || v == "" {
				if act.SkipIfAbsent {
					continue
				}
				return nil, false
			}
			entries = append(entries, Entry{Key: act.Key, Value: v})
		case RemoteAddress:
			v, ok := a.RemoteAddress()
			if !ok {
				return nil, false
			}
			entries = append(entries, Entry{Key: "remote_address", Value: v})
		case GenericKey:
			entries = append(entries, Entry{Key: keyOr(act.Key, "generic_key"), Value: act.Value})
		case HeaderValueMatch:
			if matchAll(act.Headers, a) != act.ExpectMatch {
				return nil, false
			}
			entries = append(entries, Entry{Key: keyOr(act.Key, "header_match"), Value: act.Value})
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
func matchAll(ms []HeaderMatcher, a Attributes) bool {
	for i := range ms {
		if !ms[i].matches(a) {
			return false
		}
	}
	return true
}

func (m *HeaderMatcher) matches(a Attributes) bool {
	v, ok := a.Header(m.Name)
	if !ok {
		if !m.MissingAsEmpty {
			// an absent header matches only "present: false", or an
			// inverted "present: true"
			return m.Kind == MatchPresent && m.Present == m.Invert
		}
		v = ""
	}
	var match bool
	switch m.Kind {
	case MatchPresent:
		match = m.Present
	case MatchExact:
		match = v == m.Value || m.IgnoreCase && strings.EqualFold(v, m.Value)
	case MatchPrefix, MatchPathSeparatedPrefix:
		n := len(m.Value)
		match = len(v) >= n && equal(v[:n], m.Value, m.IgnoreCase)
		if match && m.Kind == MatchPathSeparatedPrefix && len(v) > n {
			match = v[n] == '/' || v[n] == '?'
		}
	case MatchSuffix:
		match = len(v) >= len(m.Value) && equal(v[len(v)-len(m.Value):], m.Value, m.IgnoreCase)
	case MatchContains:
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
