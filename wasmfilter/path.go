package wasmfilter

import "strings"

// normalizePath returns the path of the :path value p as the filter's path
// matchers see it, and false when the filter refuses the request because
// upstreams disagree on the resource p names. The result is what an upstream
// serves when it reads the path as RFC 3986 does, cuts ";" parameters off
// each segment first as Tomcat, Jetty and Spring do, and merges slashes
// last as Envoy's merge_slashes does:
//
//   - the query is cut off ("/a?x=1" → "/a");
//   - ";" parameters are cut off every segment ("/api;a=b/x" and "/api;/x"
//     → "/api/x"); an escaped "%3B" stays data, as upstream;
//   - escapes of unreserved characters (RFC 3986 §2.3) are decoded ("/%61pi"
//     → "/api"), the hex digits of the others upper-cased ("%c3" → "%C3");
//   - "." and ".." segments are removed (§5.2.4; ".." never climbs above the
//     root), then runs of "/" merged ("//api///x" → "/api/x"); a path that
//     ends in "/" or in a dot segment keeps a final "/".
//
// Refused, because one upstream reads them as a separator or a step up
// where another reads data, so that no single reading can be counted:
//
//   - an escaped slash or backslash (%2F, %5C) and a literal "\" (Envoy's
//     path_with_escaped_slashes_action REJECT_REQUEST);
//   - a dot segment spelled with an escape or a parameter ("%2E%2E", "..;"):
//     RFC 3986 decodes "%2E" before removing dot segments, other servers
//     after, and only servers that cut parameters see "..;" as "..";
//   - a ".." after an empty segment that followed a named one ("/a//../b":
//     /a/b when slashes are merged after dot segments are removed, as Envoy
//     does, /b when before, as nginx does);
//   - a malformed escape, a "#", a control character or a space, none of
//     which a request-target may hold, and a path not starting with "/"
//     other than "*".
//
// A path in normal form of up to 128 bytes is returned as is, without
// allocating.
func normalizePath(p string) (string, bool) {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if p == "" || p[0] != '/' {
		return p, p == "*"
	}
	if !validPath(p) {
		return "", false
	}
	var buf [128]byte // most paths: no allocation when p is normal
	out := buf[:0]
	// gap: an empty segment came after a named one; trailing: the path
	// ends in "/" or a dot segment
	gap, trailing := false, false
	for rest := p[1:]; ; {
		raw, next := rest, ""
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			raw, next = rest[:i], rest[i+1:]
		}
		seg := raw
		if i := strings.IndexByte(raw, ';'); i >= 0 {
			seg = raw[:i]
		}
		start := len(out)
		out = appendSegment(append(out, '/'), seg)
		dots := dotSegment(out[start+1:])
		trailing = dots > 0 || len(out) == start+1
		switch {
		case dots > 0 && len(raw) != dots:
			return "", false // escaped, or with parameters
		case dots == 2 && gap:
			// RFC 3986 removes the empty segment, a server that merges
			// slashes first the named one: over-refused once a gap is seen
			return "", false
		case dots == 2 && start > 0:
			i := start - 1
			for out[i] != '/' {
				i--
			}
			out = out[:i]
		case trailing: // ".", an empty segment, ".." at the root
			gap = gap || dots == 0 && start > 0
			out = out[:start]
		}
		if len(raw) == len(rest) {
			break
		}
		rest = next
	}
	if len(out) == 0 || trailing {
		out = append(out, '/')
	}
	if string(out) == p {
		return p, true
	}
	return string(out), true
}

// dotSegment returns 1 for ".", 2 for "..", 0 for any other segment.
func dotSegment(seg []byte) int {
	for _, c := range seg {
		if c != '.' {
			return 0
		}
	}
	if len(seg) > 2 {
		return 0
	}
	return len(seg)
}

// validPath reports whether p holds nothing normalizePath refuses
// within a segment: a malformed escape, an escaped slash or backslash,
// "\", "#", a control character or a space.
func validPath(p string) bool {
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c <= ' ' || c == 0x7f || c == '\\' || c == '#':
			return false
		case c == '%':
			if i+2 >= len(p) {
				return false
			}
			hi, ok1 := unhex(p[i+1])
			lo, ok2 := unhex(p[i+2])
			if d := hi<<4 | lo; !ok1 || !ok2 || d == '/' || d == '\\' {
				return false
			}
			i += 2
		}
	}
	return true
}

// appendSegment appends the segment seg of a valid path, escapes of
// unreserved characters decoded and the hex digits of the others
// upper-cased.
func appendSegment(out []byte, seg string) []byte {
	for i := 0; i < len(seg); i++ {
		if seg[i] != '%' {
			out = append(out, seg[i])
			continue
		}
		hi, _ := unhex(seg[i+1])
		lo, _ := unhex(seg[i+2])
		if d := hi<<4 | lo; unreserved(d) {
			out = append(out, d)
		} else {
			out = append(out, '%', upperHexDigits[hi], upperHexDigits[lo])
		}
		i += 2
	}
	return out
}

const upperHexDigits = "0123456789ABCDEF"

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}
