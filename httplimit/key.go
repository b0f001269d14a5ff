package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/bucketgrid/bucketgrid/policy"
)

// KeyFunc maps a request to the key of its client's bucket. An error answers
// the request with 400 and a problem+json body.
type KeyFunc func(r *http.Request) (string, error)

// Errors of the key functions.
var (
	// ErrNoKey: the request carries nothing to key it by.
	ErrNoKey = errors.New("httplimit: no client key")
	// ErrKeyTooLong: the client-supplied key exceeds policy.MaxKeyBytes.
	ErrKeyTooLong = fmt.Errorf("httplimit: client key longer than %d bytes", policy.MaxKeyBytes)
	// ErrRemoteAddr: the request's RemoteAddr is not an IP address.
	ErrRemoteAddr = errors.New("httplimit: RemoteAddr is not an IP address")
)

// HeaderKey keys requests by the value of the named header, such as an API
// key, prefixed with the header's canonical name ("X-Api-Key:abc"), so that
// it can never collide with an address key. A request without the header is
// keyed by fallback (ClientIP{}.Key, say); with a nil fallback it is refused
// with ErrNoKey. Values longer than policy.MaxKeyBytes, the key limit of every front
// door, are refused with
// ErrKeyTooLong.
//
// A header key is only as good as its validation: check the key (an
// authentication middleware placed before this one) or anyone can pick a
// fresh bucket per request.
func HeaderKey(name string, fallback KeyFunc) KeyFunc {
	canon := http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := strings.TrimSpace(r.Header.Get(canon))
		switch {
		case v == "" && fallback != nil:
			return fallback(r)
		case v == "":
			return "", fmt.Errorf("%w: header %s missing", ErrNoKey, canon)
		case len(v) > policy.MaxKeyBytes:
			return "", ErrKeyTooLong
		}
		return canon + ":" + v, nil
	}
}

// ProxyHeader names the header a trusted proxy records the client's address
// in.
type ProxyHeader uint8

const (
	// XForwardedFor is X-Forwarded-For: comma-separated addresses, each proxy
	// appending the address of its peer.
	XForwardedFor ProxyHeader = iota
	// Forwarded is RFC 7239's Forwarded, whose for= parameters play the same
	// role.
	Forwarded
)

// ClientIP keys requests by the client's IP address. The zero value keys by
// the immediate peer (Request.RemoteAddr), IPv6 clients by their /64, and
// trusts no header. IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) are keyed,
// and matched against TrustedProxies, as the IPv4 addresses they are.
//
// When the immediate peer is in TrustedProxies, the proxy header is read
// from the right, one hop at a time: each address written by a trusted hop
// is the next hop; the first address that is not itself a trusted proxy is
// the client. An address a client wrote itself therefore only counts when
// every hop after it is trusted, and a header sent from an untrusted peer is
// never read. When the chain ends in something unparsable (RFC 7239's
// "unknown" or an obfuscated identifier), the last trusted hop is the key:
// such clients share a bucket rather than escape the limit.
type ClientIP struct {
	// TrustedProxies are the networks of the proxies in front of the server
	// (see ParsePrefixes). Empty: no header is trusted.
	TrustedProxies []netip.Prefix
	// Header is the header the trusted proxies write; X-Forwarded-For by
	// default. Only that header is read: a Forwarded header passed through
	// by a proxy that writes X-Forwarded-For is the client's own.
	Header ProxyHeader
	// IPv6Bits is the length of the prefix IPv6 clients are keyed by: 0
	// (the zero value) means 64, the /64 of one subscriber's network (RFC
	// 6177), 128 keys by the whole address, and values outside 1..128 are
	// taken as 64. An
	// IPv6 subscriber is routinely given a /64 or more, so keying by the
	// whole address would give one host 2^64 fresh buckets; lower it (48,
	// 56) for networks that hand out larger prefixes.
	IPv6Bits int
}

// defaultIPv6Bits is the prefix length ClientIP keys IPv6 clients by unless
// told otherwise: the /64 of one subscriber's network (RFC 6177).
const defaultIPv6Bits = 64

// Key returns the client's address as a string: "192.0.2.1" for IPv4 (and
// IPv4-mapped IPv6), "2001:db8:1:2::/64" for IPv6 (the prefix of length
// IPv6Bits), or "2001:db8::1" with IPv6Bits 128.
func (c ClientIP) Key(r *http.Request) (string, error) {
	a, err := c.addr(r)
	if err != nil {
		return "", err
	}
	if bits := c.ipv6Bits(); a.Is6() && bits < 128 {
		p, err := a.Prefix(bits)
		if err != nil {
			return "", err
		}
		return p.String(), nil
	}
	return addrString(a, r.RemoteAddr), nil
}

// ipv6Bits returns IPv6Bits, or defaultIPv6Bits outside 1..128.
func (c ClientIP) ipv6Bits() int {
	if c.IPv6Bits < 1 || c.IPv6Bits > 128 {
		return defaultIPv6Bits
	}
	return c.IPv6Bits
}

// addrString returns a.String(), without allocating when a is the host part
// of remote (the usual case: the peer is the client), which the server
// wrote canonically.
func addrString(a netip.Addr, remote string) string {
	var buf [64]byte
	s := a.AppendTo(buf[:0])
	host := remote
	if i := strings.LastIndexByte(remote, ':'); i >= 0 && a.Is4() {
		host = remote[:i]
	} else if len(remote) > 2 && remote[0] == '[' {
		if j := strings.IndexByte(remote, ']'); j > 0 {
			host = remote[1:j]
		}
	}
	if host == string(s) {
		return host
	}
	return string(s)
}

// addr returns the client's address, as Key describes.
func (c ClientIP) addr(r *http.Request) (netip.Addr, error) {
	peer, ok := parseHost(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: %q", ErrRemoteAddr, r.RemoteAddr)
	}
	if !c.trusted(peer) {
		return peer, nil
	}
	var chain []string
	if c.Header == Forwarded {
		chain = forwardedFor(r.Header.Values("Forwarded"))
	} else {
		for _, v := range r.Header.Values("X-Forwarded-For") {
			for _, e := range strings.Split(v, ",") {
				chain = append(chain, strings.TrimSpace(e))
			}
		}
	}
	hop := peer
	for i := len(chain) - 1; i >= 0; i-- {
		a, ok := parseHost(chain[i])
		if !ok {
			return hop, nil
		}
		if !c.trusted(a) {
			return a, nil
		}
		hop = a
	}
	return hop, nil
}

func (c ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParsePrefixes parses CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") and
// single addresses ("192.0.2.7", a /32 or /128) for ClientIP.TrustedProxies.
func ParsePrefixes(s ...string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(s))
	for _, v := range s {
		v = strings.TrimSpace(v)
		if strings.Contains(v, "/") {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return nil, err
			}
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, err
		}
		a = a.Unmap().WithZone("")
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// parseHost parses an address with or without a port, IPv6 with or
// without brackets, and returns it without zone and with IPv4-mapped IPv6
// unmapped, so that prefixes match it.
func parseHost(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Addr{}, false
	}
	// With a port ("192.0.2.1:80", "[2001:db8::1]:80") first: a failed
	// parse allocates its error, and RemoteAddr always has a port.
	if s[0] == '[' || strings.Count(s, ":") == 1 {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr().Unmap().WithZone(""), true
		}
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}

// forwardedFor returns the for= node of every element of the Forwarded
// field lines, in order; an element without for= yields "" (unparsable).
func forwardedFor(lines []string) []string {
	var out []string
	for _, line := range lines {
		for _, elem := range splitQuoted(line, ',') {
			node := ""
			for _, pair := range splitQuoted(elem, ';') {
				name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(strings.TrimSpace(name), "for") {
					node = unquote(strings.TrimSpace(value))
				}
			}
			out = append(out, node)
		}
	}
	return out
}

// splitQuoted splits s at sep outside quoted strings.
func splitQuoted(s string, sep byte) []string {
	var parts []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == sep && !quoted:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// unquote removes the quotes and escapes of an RFC 7230 quoted-string.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	s = s[1 : len(s)-1]
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
