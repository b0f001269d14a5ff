package main

import (
	"errors"
	"mime"
	"net"
	"net/http"
	"strconv"
)

// POST /demo/limit changes the limit of every member and has no
// authentication: it is an admin endpoint for a demo on loopback. What it
// must refuse is a write that a web page on another origin makes the
// browser of someone running the demo send (CSRF), or that a hostile DNS
// name pointing at 127.0.0.1 makes look same-origin (DNS rebinding).

// Why checkAdmin refuses a request.
var (
	errContentType = errors.New("want Content-Type: application/json")
	errHost        = errors.New("the Host header names no member")
	errOrigin      = errors.New("cross-origin writes are refused")
)

// adminHosts returns the Host values under which the members are reached:
// each listener's address and, for a loopback or unspecified one, the
// loopback names with its port.
func adminHosts(addrs []net.Addr) map[string]bool {
	hosts := map[string]bool{}
	for _, a := range addrs {
		tcp, ok := a.(*net.TCPAddr)
		if !ok {
			continue
		}
		port := strconv.Itoa(tcp.Port)
		hosts[net.JoinHostPort(tcp.IP.String(), port)] = true
		if tcp.IP.IsLoopback() || tcp.IP.IsUnspecified() {
			for _, h := range []string{"127.0.0.1", "localhost", "::1"} {
				hosts[net.JoinHostPort(h, port)] = true
			}
		}
	}
	return hosts
}

// checkAdmin lets through a write only when it is JSON (a cross-origin form
// or a no-cors fetch cannot send that type without a CORS preflight, which
// the members never grant for writes), addressed by a member's own Host,
// and, when the browser names its origin, from a member's own origin. A
// client that is not a browser (curl) sends no Origin and passes.
func checkAdmin(r *http.Request, hosts map[string]bool) (int, error) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return http.StatusUnsupportedMediaType, errContentType
	}
	if !hosts[r.Host] {
		return http.StatusForbidden, errHost
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return http.StatusForbidden, errOrigin
	}
	if origin, ok := r.Header["Origin"]; ok {
		if len(origin) != 1 || !sameOrigin(origin[0], hosts) {
			return http.StatusForbidden, errOrigin
		}
	}
	return 0, nil
}

// sameOrigin reports whether origin is http:// and one of hosts.
func sameOrigin(origin string, hosts map[string]bool) bool {
	const scheme = "http://"
	return len(origin) > len(scheme) && origin[:len(scheme)] == scheme && hosts[origin[len(scheme):]]
}
