package wasmfilter

import "strings"

// normalizePath returns the path of an HTTP :path value in the form the
// filter matches and keys on, so that spellings an upstream treats alike
// cannot escape a policy:
//
//   - the query and fragment are cut off ("/a?x=1" → "/a");
//   - percent-encoded unreserved characters (RFC 3986 §2.3: letters, digits,
//     "-", ".", "_", "~") are decoded ("/%61pi" → "/api"), and the hex
//     digits of every other escape are upper-cased ("%2f" → "%2F"; an encoded
//     slash stays encoded: it is not a separator);
//   - path parameters are cut off every segment, from its first ";" on
//     ("/api;a=b/x" and "/api;/x" → "/api/x", "/..;/" → "/../"), as Tomcat,
//     Jetty and Spring do before they route: a parameter cannot make a path
//     look like another prefix's to the filter while the upstream serves it
//     under this one (an encoded "%3B" stays data, as it does upstream);
//   - empty segments are removed ("//api///x" → "/api/x") and "." and ".."
//     segments resolved (RFC 3986 §5.2.4; ".." never climbs above the root);
//   - with foldCase, ASCII letters are lower-cased ("/API/x" → "/api/x").
//
// A trailing slash, or a final "." or ".." segment, leaves the result ending
// in "/", as in RFC 3986. A path that does not start with "/" (the asterisk
// form "*") is returned with only the query cut off and the case folded.
func normalizePath(p string, foldCase bool) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if !strings.HasPrefix(p, "/") {
		if foldCase {
			p = strings.ToLower(p)
		}
		return p
	}
	if isNormal(p, foldCase) {
		return p // the usual case costs no allocation
	}
	p = decodeUnreserved(p)
	var segs []string
	trailing := false
	for seg := range strings.SplitSeq(p[1:], "/") {
		if i := strings.IndexByte(seg, ';'); i >= 0 {
			seg = seg[:i]
		}
		trailing = false
		switch seg {
		case "", ".":
			trailing = true
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
			trailing = true
		default:
			segs = append(segs, seg)
		}
	}
	var b strings.Builder
	b.Grow(len(p))
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(s)
	}
	if trailing || len(segs) == 0 {
		b.WriteByte('/')
	}
	out := b.String()
	if foldCase {
		out = strings.ToLower(out)
	}
	return out
}

// isNormal reports whether normalizePath would return p unchanged: no
// escapes, no path parameters, no empty, "." or ".." segments, and (with
// foldCase) no upper-case letters. p starts with "/" and has no query.
func isNormal(p string, foldCase bool) bool {
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '%', c == ';':
			return false
		case c == '/':
			if i+1 < len(p) && p[i+1] == '/' {
				return false
			}
			if rest := p[i+1:]; rest == "." || rest == ".." || strings.HasPrefix(rest, "./") || strings.HasPrefix(rest, "../") {
				return false
			}
		case foldCase && 'A' <= c && c <= 'Z':
			return false
		}
	}
	return true
}

// decodeUnreserved decodes the escapes of unreserved characters and
// upper-cases the hex digits of the others; malformed escapes are kept.
func decodeUnreserved(p string) string {
	if !strings.Contains(p, "%") {
		return p
	}
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] != '%' || i+2 >= len(p) {
			b = append(b, p[i])
			continue
		}
		hi, ok1 := unhex(p[i+1])
		lo, ok2 := unhex(p[i+2])
		if !ok1 || !ok2 {
			b = append(b, p[i])
			continue
		}
		c := hi<<4 | lo
		if unreserved(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', upperHex(p[i+1]), upperHex(p[i+2]))
		}
		i += 2
	}
	return string(b)
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func upperHex(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}
