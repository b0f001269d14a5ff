package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

//go:embed index.html
var indexHTML []byte

// handler is everything a member serves: the rate-limited API under /v1/,
// the page, and the page's own endpoints under /demo/, which are not
// limited. The page fires requests at the other members and reads their
// state directly, hence the CORS headers.
func (nd *node) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/quotes/random", nd.quote)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(indexHTML)
	})
	mux.HandleFunc("GET /demo/members", nd.members)
	mux.HandleFunc("GET /demo/state", nd.state)
	mux.HandleFunc("POST /demo/limit", nd.setLimit)
	mux.HandleFunc("POST /demo/stop", nd.stopMember)
	return cors(withLimitVersion(nd.counted(nd.limiter.Handler(mux))))
}

// cors lets a page served by one member read the others: GETs only. The
// page writes the limit to its own member, so no write ever needs CORS, and
// none is granted.
func cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Access-Control-Expose-Headers",
			"RateLimit, RateLimit-Policy, Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, Limit-Version")
		if r.Method == http.MethodOptions {
			h.Set("Access-Control-Allow-Methods", "GET")
			h.Set("Access-Control-Allow-Headers", "X-API-Key, Content-Type")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

var quotes = []string{
	"Simplicity is prerequisite for reliability.",
	"Premature optimization is the root of all evil.",
	"Make it work, make it right, make it fast.",
	"There are only two hard things in computer science: cache invalidation and naming things.",
	"A distributed system is one in which the failure of a computer you didn't even know existed can render your own computer unusable.",
}

// quote is the API itself, what the limit protects.
func (nd *node) quote(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"quote":  quotes[rand.IntN(len(quotes))],
		"member": nd.index,
	})
}

type memberInfo struct {
	Index   int    `json:"index"`
	Name    string `json:"name"` // the Olric member name
	URL     string `json:"url"`
	Stopped bool   `json:"stopped"`
}

// members lists the cluster's members for the page, and which one serves it.
func (nd *node) members(w http.ResponseWriter, r *http.Request) {
	var ms []memberInfo
	for _, o := range nd.demo.nodes {
		ms = append(ms, memberInfo{Index: o.index, Name: o.member.Name(), URL: o.url, Stopped: o.stopped.Load()})
	}
	mode := "fail-open: a request whose limit check fails is served, unlimited"
	if nd.demo.failClosed {
		mode = "fail-closed: a request whose limit check fails is refused (503)"
	}
	writeJSON(w, http.StatusOK, map[string]any{"self": nd.index, "members": ms, "failureMode": mode})
}

// memberState is what a member's panel shows.
type memberState struct {
	memberInfo
	Allowed uint64      `json:"allowed"`
	Denied  uint64      `json:"denied"`
	Failed  uint64      `json:"failed"`
	Limit   Limit       `json:"limit"` // what this member applies
	Bucket  bucketState `json:"bucket"`
	// Key counts the requests of the bucket's client through this member.
	Key keyCounts `json:"keyCounts"`
}

// bucketState is one client's bucket as this member sees it in the grid.
type bucketState struct {
	Key        string `json:"key"`
	Owner      string `json:"owner"`      // Olric member name
	OwnerIndex int    `json:"ownerIndex"` // 0 when unknown
	// Stored is false when the bucket does not exist (never used, or
	// expired full); the other fields are then zero.
	Stored          bool   `json:"stored"`
	Tokens          int64  `json:"tokens"`
	Capacity        int64  `json:"capacity"`
	RefillPerMinute int64  `json:"refillPerMinute"`
	Version         int64  `json:"version"` // the stored configuration version
	MillisToFull    int64  `json:"msToFull"`
	Error           string `json:"error,omitempty"`
}

// errNotStored is the configuration function of a bucket that is only
// looked at: Diagnose must not create it.
var errNotStored = errors.New("bucket not stored")

// state reports this member's counters and the bucket of the API key in
// the query (?apikey=), read through this member from the bucket's owner.
func (nd *node) state(w http.ResponseWriter, r *http.Request) {
	st := memberState{
		memberInfo: memberInfo{Index: nd.index, Name: nd.member.Name(), URL: nd.url},
		Limit:      nd.buckets.limit(),
	}
	s := nd.limiter.Stats()
	st.Allowed, st.Denied, st.Failed = s.Allowed, s.Limited, s.FailedOpen+s.FailedClosed

	kr := r.Clone(r.Context())
	kr.Header = http.Header{}
	if k := strings.TrimSpace(r.URL.Query().Get("apikey")); k != "" {
		kr.Header.Set("X-API-Key", k)
	}
	key, err := nd.key(kr)
	if err != nil { // a fixed message, as httplimit's: the error may hold what the client sent
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "no usable client key"})
		return
	}
	b := &st.Bucket
	b.Key = key
	st.Key = nd.keys.get(key)
	b.Owner = nd.member.Owner(key)
	for _, o := range nd.demo.nodes {
		if o.member.Name() == b.Owner {
			b.OwnerIndex = o.index
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	h := nd.mgr.Bucket(key, func(context.Context) (core.Config, error) { return core.Config{}, errNotStored })
	d, err := h.Diagnose(ctx)
	switch {
	case errors.Is(err, errNotStored):
	case err != nil:
		b.Error = err.Error()
	default:
		b.Stored = true
		b.Version = d.State.ConfigVersion
		if bws := d.State.Config.Bandwidths; len(bws) > 0 {
			b.Capacity = bws[0].Capacity
			b.RefillPerMinute = bws[0].RefillTokens * int64(time.Minute) / int64(bws[0].RefillPeriod)
		}
		if len(d.Available) > 0 {
			b.Tokens = d.Available[0]
		}
		b.MillisToFull = int64((d.TimeToFull + time.Millisecond - 1) / time.Millisecond)
	}
	writeJSON(w, http.StatusOK, st)
}

// setLimit stores a new limit in the grid (the next version) and applies it
// on this member at once; the others pick it up on their next poll. It is
// an unauthenticated admin endpoint, for loopback only: it refuses
// cross-origin writes (see checkAdmin).
func (nd *node) setLimit(w http.ResponseWriter, r *http.Request) {
	if status, err := checkAdmin(r, nd.demo.hosts); err != nil {
		writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	var in Limit
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want JSON {capacity, refillPerMinute}: " + err.Error()})
		return
	}
	if err := in.validate(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	l, err := nd.limits.set(ctx, in.Capacity, in.RefillPerMinute)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	nd.buckets.apply(l)
	nd.demo.log.Printf("member %d: stored limit v%d: capacity %d, refill %d/min", nd.index, l.Version, l.Capacity, l.RefillPerMinute)
	writeJSON(w, http.StatusOK, l)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// stopMember stops another member ({"member": i}), as a visitor's way of
// seeing what a member's failure does: its HTTP stops answering and it
// leaves the grid, its buckets handed over to the others (with one replica
// they start over empty there, refilling from the takeover). The page's own member cannot be stopped,
// so one always runs. Like setLimit, for loopback only.
func (nd *node) stopMember(w http.ResponseWriter, r *http.Request) {
	if status, err := checkAdmin(r, nd.demo.hosts); err != nil {
		writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	var in struct {
		Member int `json:"member"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want JSON {member}: " + err.Error()})
		return
	}
	var target *node
	for _, o := range nd.demo.nodes {
		if o.index == in.Member {
			target = o
		}
	}
	switch {
	case target == nil:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such member"})
		return
	case target == nd:
		writeJSON(w, http.StatusConflict, map[string]string{"error": "this page's own member serves the page: stop another"})
		return
	case target.stopped.Load():
		writeJSON(w, http.StatusOK, map[string]any{"member": target.index, "stopped": true})
		return
	}
	nd.demo.log.Printf("member %d: stopping member %d at a visitor's request", nd.index, target.index)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := target.stop(ctx); err != nil {
			nd.demo.log.Printf("member %d: stop: %v", target.index, err)
		}
	}()
	writeJSON(w, http.StatusAccepted, map[string]any{"member": target.index, "stopped": true})
}
