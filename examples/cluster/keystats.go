package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"
)

// maxTrackedKeys bounds the clients a member counts for the page; past it
// the counts start over.
const maxTrackedKeys = 1024

// keyCounts are one client's requests through one member: what the page
// adds up over the members into "the cluster admitted exactly N of M".
type keyCounts struct {
	Admitted uint64 `json:"admitted"`       // answered by the API under the limit
	Denied   uint64 `json:"denied"`         // 429
	Failed   uint64 `json:"failed"`         // the limiter failed (open: served anyway, closed: 503)
	First    int64  `json:"firstUnixMilli"` // the first request's time
}

// keyStats counts requests per client key.
type keyStats struct {
	mu   sync.Mutex
	keys map[string]*keyCounts
}

func (s *keyStats) get(key string) keyCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.keys[key]; c != nil {
		return *c
	}
	return keyCounts{}
}

func (s *keyStats) add(key string, status int, failed bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil || (len(s.keys) >= maxTrackedKeys && s.keys[key] == nil) {
		s.keys = map[string]*keyCounts{}
	}
	c := s.keys[key]
	if c == nil {
		c = &keyCounts{First: now.UnixMilli()}
		s.keys[key] = c
	}
	switch {
	case failed:
		c.Failed++
	case status == http.StatusTooManyRequests:
		c.Denied++
	case status < 300:
		c.Admitted++
	}
}

// failedMark is where the limiter's error hook marks a request whose
// limit check failed.
type failedMark struct{}

// counted wraps the limited API: it counts each request under its client
// key by how it was answered.
func (nd *node) counted(limited http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			limited.ServeHTTP(w, r)
			return
		}
		key, err := nd.key(r)
		if err != nil {
			limited.ServeHTTP(w, r)
			return
		}
		failed := new(bool)
		r = r.WithContext(context.WithValue(r.Context(), failedMark{}, failed))
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		limited.ServeHTTP(sw, r)
		nd.keys.add(key, sw.status, *failed, time.Now())
	})
}

// markFailed notes on r that its limit check failed.
func markFailed(r *http.Request) {
	if p, ok := r.Context().Value(failedMark{}).(*bool); ok {
		*p = true
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}
