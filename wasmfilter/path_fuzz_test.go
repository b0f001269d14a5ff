package wasmfilter

import (
	"strings"
	"testing"

	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/shareddata"
)

// The reference: upstreams written from RFC 3986 and from what servers do
// beyond it, independently of the filter's normalisation (path.go), to
// judge it. An upstream reads the request path into the resource it
// serves; the filter must count a request under a limit whenever any of
// them would serve a resource under it, or refuse it.

// upstream is one way of reading a request path.
type upstream struct {
	keepParams   bool // ";" parameters stay in their segment (plain RFC 3986); else cut off each (Tomcat, Jetty, Spring)
	decodeSlash  bool // %2F and %5C are separators (Go's net/http, Tomcat with ALLOW_ENCODED_SLASH)
	backslash    bool // "\" is a separator (IIS, Windows file servers)
	decodeLate   bool // unreserved escapes decoded after dot segments are removed, not before (RFC 3986 §6.2.2)
	fragmentData bool // "#" is data, not the end of the path
	merge        int  // runs of "/" merged: 0 never (RFC 3986), 1 before dot segments (nginx), 2 after (Envoy)
}

// upstreams are every combination of the choices above.
func upstreams() []upstream {
	var us []upstream
	for i := 0; i < 1<<5*3; i++ {
		us = append(us, upstream{keepParams: i&1 != 0, decodeSlash: i&2 != 0, backslash: i&4 != 0,
			decodeLate: i&8 != 0, fragmentData: i&16 != 0, merge: i >> 5})
	}
	return us
}

// serve returns the resource u serves for the request path raw, and false
// when it answers an error (a malformed escape, a character no request
// line carries, a path not starting with "/").
func (u upstream) serve(raw string) (string, bool) {
	p, _, _ := strings.Cut(raw, "?")
	if !u.fragmentData {
		p, _, _ = strings.Cut(p, "#")
	}
	if !strings.HasPrefix(p, "/") {
		return "", false
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] == 0x7f {
			return "", false
		}
		if p[i] == '%' && (i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2])) {
			return "", false
		}
	}
	if u.decodeSlash {
		p = replaceFold(p, "%2F", "/")
		p = replaceFold(p, "%5C", `\`)
	}
	if u.backslash {
		p = strings.ReplaceAll(p, `\`, "/")
	}
	if !u.decodeLate {
		p = decodeUnreservedRef(p)
	}
	if !u.keepParams {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			segs[i], _, _ = strings.Cut(s, ";")
		}
		p = strings.Join(segs, "/")
	}
	if u.merge == 1 {
		p = refMergeSlashes(p)
	}
	p = removeDotSegments(p)
	if u.merge == 2 {
		p = refMergeSlashes(p)
	}
	if u.decodeLate {
		p = decodeUnreservedRef(p)
	}
	return p, true
}

func isHex(c byte) bool { return strings.IndexByte("0123456789abcdefABCDEF", c) >= 0 }

// replaceFold replaces old (an upper case escape) in any letter case.
func replaceFold(s, old, repl string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if i+len(old) <= len(s) && strings.EqualFold(s[i:i+len(old)], old) {
			b.WriteString(repl)
			i += len(old) - 1
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// decodeUnreservedRef decodes the escapes of RFC 3986's unreserved
// characters and upper-cases the hex of the others (§6.2.2.1–2).
func decodeUnreservedRef(p string) string {
	const unreservedSet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
			esc := strings.ToUpper(p[i : i+3])
			c := byte(strings.IndexByte("0123456789ABCDEF", esc[1])<<4 | strings.IndexByte("0123456789ABCDEF", esc[2]))
			if strings.IndexByte(unreservedSet, c) >= 0 {
				b.WriteByte(c)
			} else {
				b.WriteString(esc)
			}
			i += 2
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

func refMergeSlashes(p string) string {
	for strings.Contains(p, "//") {
		p = strings.ReplaceAll(p, "//", "/")
	}
	return p
}

// removeDotSegments is RFC 3986 §5.2.4, step by step.
func removeDotSegments(in string) string {
	out := ""
	pop := func() {
		if i := strings.LastIndexByte(out, '/'); i >= 0 {
			out = out[:i]
		} else {
			out = ""
		}
	}
	for in != "" {
		switch {
		case strings.HasPrefix(in, "../"):
			in = in[3:]
		case strings.HasPrefix(in, "./"):
			in = in[2:]
		case strings.HasPrefix(in, "/./"):
			in = in[2:]
		case in == "/.":
			in = "/"
		case strings.HasPrefix(in, "/../"):
			in = in[3:]
			pop()
		case in == "/..":
			in = "/"
			pop()
		case in == "." || in == "..":
			in = ""
		default:
			i := strings.IndexByte(in[1:], '/')
			if i < 0 {
				out, in = out+in, ""
			} else {
				out, in = out+in[:i+1], in[i+1:]
			}
		}
	}
	return out
}

// pathLimits are the limited paths of the fuzz test: a matcher and whether
// a resource an upstream serves lies under it.
var pathLimits = []struct {
	matcher string
	under   func(r string) bool
}{
	{`"prefix_match": "/api/"`, func(r string) bool { return strings.HasPrefix(r, "/api/") }},
	{`"path_separated_prefix": "/api"`, func(r string) bool { return r == "/api" || strings.HasPrefix(r, "/api/") }},
	{`"exact_match": "/api/x"`, func(r string) bool { return r == "/api/x" }},
}

// pathSeeds are spellings of the limited paths and of their neighbours.
var pathSeeds = []string{
	"/api/x", "/api;/x", "/api;a=b/x", "/api", "/apix", "/;/api/x", "/api/x;v=1", "/api/x?q=1", "/%61pi/x",
	"//api/x", "/api//x", "/static/../api/x", "/api/./x", "/../api/x", "/api/x/.", "/api%2Fx", "/api%5cx",
	"/api\\x", "/x/..;/api/x", "/x/%2e%2e/api/x", "/x//../api/x", "/x/;/../api/x", "/api/x#f", "/api/x%",
	"/a/b/../../api/x", "/api/x/y/..", "/api/x/..", "//..", "/#/../api/x", "/api/x%00", "*", "",
	"/" + strings.Repeat("a/", 70) + strings.Repeat("../", 70) + "api;/x",
}

// FuzzPathSpellings: no spelling of a limited path escapes its limit — for
// every request path, every limit (a string prefix, a segment prefix, an
// exact path) and every upstream reading, the filter counts the request
// (429 under a limit of 0) or refuses it (400) whenever the upstream would
// serve a resource under the limit. And whatever the filter accepts, it
// matches in the form the reference gives for an upstream that cuts ";"
// parameters, decodes unreserved escapes, removes dot segments and then
// merges slashes (Envoy's normalize_path and merge_slashes, with Tomcat's
// parameters): the normalisation is that reading, not merely a safe one.
func FuzzPathSpellings(f *testing.F) {
	for _, s := range pathSeeds {
		f.Add(s)
	}
	vms := make([]*fakeVM, len(pathLimits))
	for i, l := range pathLimits {
		vms[i] = newFakeVM(f, shareddata.New(), newClock(), pathConfig(l.matcher, ""))
	}
	ups := upstreams()
	envoyTomcat := upstream{merge: 2}
	f.Fuzz(func(t *testing.T, p string) {
		if len(p) > 512 {
			return // longer than any path a test needs, past the 128-byte buffer
		}
		for i, l := range pathLimits {
			r := vms[i].do("", map[string]string{":path": p})
			switch r.status {
			case 400, 429:
				continue
			case 200:
			default:
				t.Fatalf("%q under %s: status %d", p, l.matcher, r.status)
			}
			for _, u := range ups {
				if res, ok := u.serve(p); ok && l.under(res) {
					t.Errorf("%q escapes %s: admitted, and upstream %+v serves %q", p, l.matcher, u, res)
				}
			}
		}
		n, ok := normalizePath(p)
		if !ok {
			return
		}
		if n == "*" {
			return // the asterisk form ("*", "*?q"): no path to normalise
		}
		if want, _ := envoyTomcat.serve(p); n != want {
			t.Errorf("%q normalises to %q, the reference reads %q", p, n, want)
		}
		if n2, ok := normalizePath(n); !ok || n2 != n {
			t.Errorf("%q normalises to %q, which normalises to %q (accepted %v)", p, n, n2, ok)
		}
	})
}
