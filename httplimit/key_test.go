package httplimit

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/bucketgrid/bucketgrid/policy"
)

func TestClientIP(t *testing.T) {
	proxies := mustParsePrefixes("10.0.0.0/8", "192.0.2.7", "2001:db8:ffff::/48")
	tests := []struct {
		name      string
		c         ClientIP
		remote    string
		xff       []string
		forwarded []string
		want      string
	}{
		{name: "peer", remote: "203.0.113.9:5555", want: "203.0.113.9"},
		{name: "peer without port", remote: "203.0.113.9", want: "203.0.113.9"},
		{name: "spoofed XFF from untrusted peer is ignored", c: ClientIP{TrustedProxies: proxies},
			remote: "203.0.113.9:5555", xff: []string{"198.51.100.1"}, want: "203.0.113.9"},
		{name: "spoofed Forwarded from untrusted peer is ignored", c: ClientIP{TrustedProxies: proxies, Header: Forwarded},
			remote: "203.0.113.9:5555", forwarded: []string{"for=198.51.100.1"}, want: "203.0.113.9"},
		{name: "no trusted proxies: XFF ignored even from 10/8", remote: "10.1.2.3:80",
			xff: []string{"198.51.100.1"}, want: "10.1.2.3"},
		{name: "trusted proxy: XFF honoured", c: ClientIP{TrustedProxies: proxies},
			remote: "10.1.2.3:80", xff: []string{"198.51.100.1"}, want: "198.51.100.1"},
		{name: "client-sent entries left of the client are ignored", c: ClientIP{TrustedProxies: proxies},
			remote: "10.1.2.3:80", xff: []string{"6.6.6.6, 7.7.7.7, 198.51.100.1"}, want: "198.51.100.1"},
		{name: "multiple trusted hops are skipped", c: ClientIP{TrustedProxies: proxies},
			remote: "10.1.2.3:80", xff: []string{"6.6.6.6, 198.51.100.1, 192.0.2.7", "10.9.9.9"}, want: "198.51.100.1"},
		{name: "untrusted hop in the middle stops the walk", c: ClientIP{TrustedProxies: proxies},
			remote: "10.1.2.3:80", xff: []string{"198.51.100.1, 203.0.113.50, 10.9.9.9"}, want: "203.0.113.50"},
		{name: "all hops trusted: the leftmost", c: ClientIP{TrustedProxies: proxies},
			remote: "10.1.2.3:80", xff: []string{"10.0.0.1, 10.0.0.2"}, want: "10.0.0.1"},
		{name: "trusted proxy without header: the proxy", c: ClientIP{TrustedProxies: proxies},
			remote: "10.1.2.3:80", want: "10.1.2.3"},
		{name: "garbage entry: the last trusted hop", c: ClientIP{TrustedProxies: proxies},
			remote: "10.1.2.3:80", xff: []string{"nonsense, 10.0.0.2"}, want: "10.0.0.2"},
		{name: "XFF entries with ports and brackets", c: ClientIP{TrustedProxies: proxies},
			remote: "10.1.2.3:80", xff: []string{"[2001:db8::5]:443, 198.51.100.1:1234"}, want: "198.51.100.1"},
		{name: "Forwarded ignored when proxies write XFF", c: ClientIP{TrustedProxies: proxies},
			remote: "10.1.2.3:80", forwarded: []string{"for=198.51.100.1"}, want: "10.1.2.3"},
		{name: "XFF ignored when proxies write Forwarded", c: ClientIP{TrustedProxies: proxies, Header: Forwarded},
			remote: "10.1.2.3:80", xff: []string{"198.51.100.1"}, want: "10.1.2.3"},
		{name: "Forwarded honoured", c: ClientIP{TrustedProxies: proxies, Header: Forwarded},
			remote: "10.1.2.3:80", forwarded: []string{`for=192.0.2.60;proto=http;by=203.0.113.43`}, want: "192.0.2.60"},
		{name: "Forwarded multiple hops, quoted IPv6 with port", c: ClientIP{TrustedProxies: proxies, Header: Forwarded},
			remote:    "10.1.2.3:80",
			forwarded: []string{`for=6.6.6.6, For="[2001:db8:cafe::17]:4711"`, `for=10.0.0.9;by="[2001:db8::1]"`},
			want:      "2001:db8:cafe::/64"},
		{name: "Forwarded quoted comma does not split", c: ClientIP{TrustedProxies: proxies, Header: Forwarded},
			remote: "10.1.2.3:80", forwarded: []string{`for=198.51.100.1;x="a,b", for=10.0.0.9`}, want: "198.51.100.1"},
		{name: "Forwarded unknown: the last trusted hop", c: ClientIP{TrustedProxies: proxies, Header: Forwarded},
			remote: "10.1.2.3:80", forwarded: []string{`for=unknown, for=10.0.0.9`}, want: "10.0.0.9"},
		{name: "Forwarded element without for", c: ClientIP{TrustedProxies: proxies, Header: Forwarded},
			remote: "10.1.2.3:80", forwarded: []string{`proto=https`}, want: "10.1.2.3"},
		{name: "IPv6 peer: its /64 by default", remote: "[2001:db8::1]:443", want: "2001:db8::/64"},
		{name: "IPv6 peer with zone", remote: "[fe80::1%eth0]:443", want: "fe80::/64"},
		{name: "IPv6 trusted proxy", c: ClientIP{TrustedProxies: proxies},
			remote: "[2001:db8:ffff::2]:443", xff: []string{"2001:db8:1:2:3:4:5:6"}, want: "2001:db8:1:2::/64"},
		{name: "IPv6 untrusted proxy", c: ClientIP{TrustedProxies: proxies},
			remote: "[2001:db8:fffe::2]:443", xff: []string{"2001:db8:1:2:3:4:5:6"}, want: "2001:db8:fffe::/64"},
		{name: "IPv6 /64 key", c: ClientIP{IPv6Bits: 64}, remote: "[2001:db8:1:2:3:4:5:6]:1", want: "2001:db8:1:2::/64"},
		{name: "IPv6 whole address", c: ClientIP{IPv6Bits: 128}, remote: "[2001:db8:1:2:3:4:5:6]:1", want: "2001:db8:1:2:3:4:5:6"},
		{name: "IPv6 /48", c: ClientIP{IPv6Bits: 48}, remote: "[2001:db8:1:2:3:4:5:6]:1", want: "2001:db8:1::/48"},
		{name: "IPv6 bits out of range: the default", c: ClientIP{IPv6Bits: 200}, remote: "[2001:db8:1:2:3:4:5:6]:1", want: "2001:db8:1:2::/64"},
		{name: "IPv4-mapped peer keyed as IPv4", remote: "[::ffff:198.51.100.7]:1", want: "198.51.100.7"},
		{name: "IPv4-mapped XFF entry keyed as IPv4", c: ClientIP{TrustedProxies: proxies},
			remote: "10.1.2.3:80", xff: []string{"::ffff:198.51.100.8"}, want: "198.51.100.8"},
		{name: "IPv6 /64 leaves IPv4 alone", c: ClientIP{IPv6Bits: 64}, remote: "198.51.100.1:1", want: "198.51.100.1"},
		{name: "IPv4-mapped peer matches IPv4 prefix", c: ClientIP{TrustedProxies: proxies},
			remote: "[::ffff:10.0.0.1]:80", xff: []string{"198.51.100.1"}, want: "198.51.100.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			for _, v := range tt.forwarded {
				r.Header.Add("Forwarded", v)
			}
			got, err := tt.c.Key(r)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestClientIPBadRemoteAddr(t *testing.T) {
	for _, remote := range []string{"", "@", "example.com:80"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		if _, err := (ClientIP{}).Key(r); !errors.Is(err, ErrRemoteAddr) {
			t.Errorf("RemoteAddr %q: err = %v, want ErrRemoteAddr", remote, err)
		}
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes("10.1.2.3/8", " 192.0.2.7 ", "::ffff:10.0.0.0/104", "2001:db8::1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.7/32", "10.0.0.0/8", "2001:db8::1/128"}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("prefix %d = %v, want %s", i, got[i], want[i])
		}
	}
	if _, err := ParsePrefixes("10.0.0.0/33"); err == nil {
		t.Error("bad prefix accepted")
	}
	if _, err := ParsePrefixes("nonsense"); err == nil {
		t.Error("bad address accepted")
	}
}

func TestHeaderKey(t *testing.T) {
	ip := ClientIP{}.Key
	tests := []struct {
		name     string
		fallback KeyFunc
		value    string
		want     string
		err      error
	}{
		{name: "header", fallback: ip, value: "abc", want: "X-Api-Key:abc"},
		{name: "trimmed", fallback: ip, value: "  abc ", want: "X-Api-Key:abc"},
		{name: "fallback", fallback: ip, value: "", want: "192.0.2.1"},
		{name: "no fallback", value: "", err: ErrNoKey},
		{name: "too long", fallback: ip, value: strings.Repeat("k", policy.MaxKeyBytes+1), err: ErrKeyTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil) // RemoteAddr 192.0.2.1:1234
			if tt.value != "" {
				r.Header.Set("x-api-key", tt.value)
			}
			got, err := HeaderKey("x-api-key", tt.fallback)(r)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
		})
	}
	// An API key can never collide with an address key.
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Api-Key", "192.0.2.1")
	if k, _ := HeaderKey("X-Api-Key", ip)(r); k == "192.0.2.1" {
		t.Error("header value collides with an address key")
	}
}

// mustParsePrefixes is ParsePrefixes that panics on error, for the tests'
// configuration known at compile time.
func mustParsePrefixes(s ...string) []netip.Prefix {
	p, err := ParsePrefixes(s...)
	if err != nil {
		panic(err)
	}
	return p
}
