package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestLimitRefusesCrossOriginWrites: POST /demo/limit, an unauthenticated
// admin endpoint, takes JSON from the members' own Host and Origin only, so
// a page on another origin cannot make a visitor's browser change the limit
// (CSRF), nor a hostile name resolving to 127.0.0.1 pose as a member (DNS
// rebinding). Refused writes never reach the grid: the node here has none.
func TestLimitRefusesCrossOriginWrites(t *testing.T) {
	hosts := adminHosts([]net.Addr{
		&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8081},
		&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8082},
	})
	nd := &node{index: 1, demo: &Demo{hosts: hosts}}
	tests := []struct {
		name        string
		host        string
		contentType string
		header      map[string]string
		want        int // 0: let through to the limit's validation (400 here, capacity 0)
	}{
		{"curl on loopback", "127.0.0.1:8081", "application/json", nil, 0},
		{"the page itself", "127.0.0.1:8081", "application/json",
			map[string]string{"Origin": "http://127.0.0.1:8081", "Sec-Fetch-Site": "same-origin"}, 0},
		{"another member's page", "127.0.0.1:8081", "application/json; charset=utf-8",
			map[string]string{"Origin": "http://127.0.0.1:8082"}, 0},
		{"localhost", "localhost:8082", "application/json", map[string]string{"Origin": "http://localhost:8082"}, 0},
		{"form post from anywhere", "127.0.0.1:8081", "application/x-www-form-urlencoded",
			map[string]string{"Origin": "https://evil.example"}, http.StatusUnsupportedMediaType},
		{"text/plain no-cors fetch", "127.0.0.1:8081", "text/plain", nil, http.StatusUnsupportedMediaType},
		{"no content type", "127.0.0.1:8081", "", nil, http.StatusUnsupportedMediaType},
		{"another origin", "127.0.0.1:8081", "application/json", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"opaque origin", "127.0.0.1:8081", "application/json", map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"https of a member's host", "127.0.0.1:8081", "application/json", map[string]string{"Origin": "https://127.0.0.1:8081"}, http.StatusForbidden},
		{"cross-site fetch", "127.0.0.1:8081", "application/json", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"DNS rebinding", "rebind.evil.example:8081", "application/json",
			map[string]string{"Origin": "http://rebind.evil.example:8081"}, http.StatusForbidden},
		{"a port that is no member", "127.0.0.1:9999", "application/json", nil, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/demo/limit", strings.NewReader(`{"capacity":0,"refillPerMinute":1}`))
			r.Host = tt.host
			if tt.contentType != "" {
				r.Header.Set("Content-Type", tt.contentType)
			}
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			nd.setLimit(w, r)
			want := tt.want
			if want == 0 {
				want = http.StatusBadRequest // passed the guard, refused by validation
			}
			if w.Code != want {
				t.Fatalf("status %d, want %d: %s", w.Code, want, w.Body.String())
			}
		})
	}

	// No CORS preflight grants a write.
	r := httptest.NewRequest("OPTIONS", "/demo/limit", nil)
	r.Header.Set("Origin", "https://evil.example")
	r.Header.Set("Access-Control-Request-Method", "POST")
	w := httptest.NewRecorder()
	cors(http.NotFoundHandler()).ServeHTTP(w, r)
	if m := w.Header().Get("Access-Control-Allow-Methods"); strings.Contains(m, "POST") {
		t.Errorf("preflight allows %q", m)
	}
}
