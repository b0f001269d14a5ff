package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	redis "github.com/bucketgrid/bucketgrid/grid/redis"
	"github.com/bucketgrid/bucketgrid/httplimit"
	"github.com/bucketgrid/bucketgrid/internal/harness/storetest"
	"github.com/bucketgrid/bucketgrid/tck"
)

// startHint says how to get a server when REDIS_ADDR is unset.
const startHint = `start one with: scripts/servers.sh start && eval "$(scripts/servers.sh env)" ` +
	"(or point REDIS_ADDR at any Redis you may write to)"

// redisAddr returns REDIS_ADDR. Unset, the test skips, except under CI,
// where a backend test that cannot reach its server must fail: a green run
// has to mean the backend really ran.
func redisAddr(t testing.TB) string {
	t.Helper()
	return storetest.Server(t, "REDIS_ADDR", "the Redis backend tests need a server", startHint)
}

// runPrefix is unique to this test process, so runs sharing a server never
// see each other's keys.
var runPrefix = func() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "bgtest:" + hex.EncodeToString(b[:]) + ":"
}()

// newClient returns a client as the package documentation recommends it,
// closed at cleanup.
func newClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStore returns a store on the server at REDIS_ADDR under this run's
// prefix; at cleanup it deletes every key the run left.
func newStore(t testing.TB) (*redis.Store, *goredis.Client) {
	t.Helper()
	return newStoreUnder(t, runPrefix)
}

// storeSeq numbers the stores TestTCK makes.
var storeSeq atomic.Int64

// newStoreUnder is newStore with the given prefix; at cleanup it deletes
// every key under that prefix, and only those.
func newStoreUnder(t testing.TB, prefix string) (*redis.Store, *goredis.Client) {
	t.Helper()
	c := newClient(t, redisAddr(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("no Redis at REDIS_ADDR=%s: %v; %s", c.Options().Addr, err, startHint)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Unlink(ctx, iter.Val())
		}
	})
	return redis.New(c, redis.WithPrefix(prefix)), c
}

// TestTCK is the whole compatibility kit: the one call a backend needs. The
// kit runs some checks at the same time, so each store gets a prefix of its
// own, and its cleanup deletes only its keys.
func TestTCK(t *testing.T) {
	newStore(t) // skip or fail early, once, when there is no server
	tck.RunStore(t, func(t *testing.T) cas.Store {
		s, _ := newStoreUnder(t, fmt.Sprintf("%stck%d:", runPrefix, storeSeq.Add(1)))
		return s
	})
}

// The script is sent once; when the server forgets it (SCRIPT FLUSH stands
// in for a restart or a failover), the next write gets NOSCRIPT, falls back
// to EVAL, and later writes find it cached again.
func TestNoScriptFallback(t *testing.T) {
	s, c := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Insert(ctx, "noscript", []byte("a"), 0); err != nil || !ok {
		t.Fatalf("Insert: ok=%v err=%v", ok, err)
	}
	if n := redis.Fallbacks(s); n != 0 {
		t.Fatalf("%d fallbacks after Load, want 0: EVALSHA should have found the script", n)
	}

	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	_, ver, _, err := s.Get(ctx, "noscript")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Replace(ctx, "noscript", []byte("b"), ver, 0); err != nil || !ok {
		t.Fatalf("Replace after SCRIPT FLUSH: ok=%v err=%v; want the EVAL fallback to write", ok, err)
	}
	if n := redis.Fallbacks(s); n != 1 {
		t.Fatalf("%d fallbacks after SCRIPT FLUSH, want 1", n)
	}
	got, ver2, _, err := s.Get(ctx, "noscript")
	if err != nil || string(got) != "b" {
		t.Fatalf("Get after the fallback write = %q, %v; want \"b\"", got, err)
	}

	// A stale version through the fallback is still a lost race, not an error.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Replace(ctx, "noscript", []byte("c"), ver, 0); err != nil || ok {
		t.Fatalf("stale Replace through the fallback: ok=%v err=%v; want a lost race", ok, err)
	}
	if ok, err := s.Replace(ctx, "noscript", []byte("d"), ver2, 0); err != nil || !ok {
		t.Fatalf("Replace once EVAL cached the script again: ok=%v err=%v", ok, err)
	}
	if n := redis.Fallbacks(s); n != 2 {
		t.Fatalf("%d fallbacks, want 2: EVAL should have cached the script for the next EVALSHA", n)
	}
}

// A write resent after a lost reply (go-redis retries on a dropped
// connection) finds its own version and answers "written", not "lost race";
// another client's insert still loses.
func TestResentWriteIsNotALostRace(t *testing.T) {
	s, _ := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, want := range []bool{true, true} {
		if ok, err := redis.InsertAs(ctx, s, "resend", 42, []byte("x"), 0); err != nil || ok != want {
			t.Fatalf("send %d: ok=%v err=%v, want ok=%v", i+1, ok, err, want)
		}
	}
	if ok, err := redis.InsertAs(ctx, s, "resend", 43, []byte("y"), 0); err != nil || ok {
		t.Fatalf("another client's Insert: ok=%v err=%v, want a lost race", ok, err)
	}
	if got, ver, _, _ := s.Get(ctx, "resend"); string(got) != "x" || ver != 42 {
		t.Fatalf("Get = %q version %d, want \"x\" version 42", got, ver)
	}
}

// The layout is what the documentation says: one string under the prefix,
// 8 bytes of version then the state, with PX for a TTL and none for TTL 0.
func TestLayoutAndTTL(t *testing.T) {
	s, c := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ok, err := s.Insert(ctx, "layout", []byte("state"), time.Hour); err != nil || !ok {
		t.Fatalf("Insert: ok=%v err=%v", ok, err)
	}
	raw, err := c.Get(ctx, runPrefix+"layout").Bytes()
	if err != nil || len(raw) != 8+len("state") || string(raw[8:]) != "state" {
		t.Fatalf("raw value %q, %v; want 8 version bytes then \"state\"", raw, err)
	}
	if _, ver, _, _ := s.Get(ctx, "layout"); uint64(ver) != binary.BigEndian.Uint64(raw) {
		t.Errorf("Get's version %d is not the raw value's first 8 bytes %x", ver, raw[:8])
	}
	if pttl := c.PTTL(ctx, runPrefix+"layout").Val(); pttl <= 59*time.Minute || pttl > time.Hour {
		t.Errorf("PTTL after a 1 h TTL = %v", pttl)
	}
	_, ver, _, _ := s.Get(ctx, "layout")
	if ok, err := s.Replace(ctx, "layout", []byte("w"), ver, 0); err != nil || !ok {
		t.Fatalf("Replace: ok=%v err=%v", ok, err)
	}
	if pttl := c.PTTL(ctx, runPrefix+"layout").Val(); pttl != -1*time.Nanosecond {
		t.Errorf("PTTL after a Replace with TTL 0 = %v, want -1 (no expiry): every write sets the TTL anew", pttl)
	}

	// A sub-millisecond TTL must expire, not become "no expiry".
	if ok, err := s.Insert(ctx, "tiny", []byte("v"), 300*time.Microsecond); err != nil || !ok {
		t.Fatalf("Insert: ok=%v err=%v", ok, err)
	}
	if pttl := c.PTTL(ctx, runPrefix+"tiny").Val(); pttl == -1*time.Nanosecond {
		t.Errorf("a 300µs TTL became no expiry")
	}
	time.Sleep(20 * time.Millisecond)
	if _, _, found, err := s.Get(ctx, "tiny"); err != nil || found {
		t.Errorf("a 300µs TTL: after 20ms found=%v err=%v, want expired", found, err)
	}
}

// TTLs round up to Redis's milliseconds: never expire earlier than asked.
func TestTTLMillis(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want int64
	}{
		{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {time.Millisecond, 1},
		{1500 * time.Microsecond, 2}, {2 * time.Second, 2000}, {time.Second + 1, 1001},
	} {
		if got := redis.TTLMillis(tc.ttl); got != tc.want {
			t.Errorf("ttlMillis(%v) = %d, want %d", tc.ttl, got, tc.want)
		}
	}
}

// A key holding something this store did not write is an error, never
// "absent": the bucket must not be recreated over another application's data.
func TestForeignValueIsAnError(t *testing.T) {
	s, c := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.Set(ctx, runPrefix+"foreign", "abc", 0)
	if _, _, found, err := s.Get(ctx, "foreign"); !errors.Is(err, redis.ErrCorrupt) || found {
		t.Fatalf("Get of a 3-byte foreign value: found=%v err=%v, want ErrCorrupt", found, err)
	}
	c.HSet(ctx, runPrefix+"hash", "f", "v")
	if _, _, _, err := s.Get(ctx, "hash"); err == nil {
		t.Fatal("Get of a hash key: no error, want WRONGTYPE")
	} else if !errors.Is(err, redis.ErrCorrupt) || !errors.Is(err, core.ErrCorruptState) {
		t.Fatalf("Get of a hash key: %v, want ErrCorrupt wrapping core.ErrCorruptState", err)
	}
	if ok, err := s.Insert(ctx, "hash", []byte("v"), 0); err == nil {
		t.Fatalf("Insert over a hash key: ok=%v, no error; want the script's WRONGTYPE error", ok)
	} else if !errors.Is(err, core.ErrCorruptState) {
		t.Fatalf("Insert over a hash key: %v, want an error wrapping core.ErrCorruptState", err)
	}
	ops := []*cas.Op{{Kind: cas.OpGet, Key: "foreign"}, {Kind: cas.OpGet, Key: "hash"}}
	if err := s.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if !errors.Is(op.Result.Err, core.ErrCorruptState) {
			t.Fatalf("Batch read of %s: %v, want an error wrapping core.ErrCorruptState", op.Key, op.Result.Err)
		}
	}
}

// TestForeignValueNeverFailsOpen: a value this store did not write is a
// corrupt record, not an outage: the middleware refuses the request (503)
// even when it fails open.
func TestForeignValueNeverFailsOpen(t *testing.T) {
	s, c := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.HSet(ctx, runPrefix+"X-Key:client-1", "f", "v") // HeaderKey's key for client-1
	cfg, err := core.NewConfig(core.Greedy(2, 2, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	m := bucketgrid.NewManager(cas.New(s))
	mw := httplimit.New(httplimit.NewManaged(m, httplimit.StaticPlan(cfg)),
		httplimit.WithKey(httplimit.HeaderKey("X-Key", nil)), httplimit.WithFailOpen(true))
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Key", "client-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want 503 whatever the failure mode (stats %+v)", w.Code, mw.Stats())
		}
	}
	if st := mw.Stats(); st.FailedOpen != 0 || st.FailedClosed != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// silentServer accepts connections and never answers: a hung Redis.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
			close(done)
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

// closedPort returns an address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// In an outage every call returns an error — never ok=false, never
// found=false — and returns within the context's deadline; through the
// executor the error is a cas.ErrStore, which the middleware turns into
// fail-open or fail-closed instead of retrying it as contention.
func TestOutage(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr func(t *testing.T) string
	}{
		{"refused", closedPort},
		{"hung", silentServer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const timeout = 300 * time.Millisecond
			s := redis.New(newClient(t, tc.addr(t)))
			call := func(what string, f func(ctx context.Context) error) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				start := time.Now()
				err := f(ctx)
				if took := time.Since(start); took > timeout+15*time.Second { // a hang, not a slow machine
					t.Errorf("%s took %v with a %v deadline", what, took, timeout)
				}
				if err == nil {
					t.Errorf("%s: nil error in an outage: a failure reported as a lost race or an absent key", what)
				}
			}
			call("Get", func(ctx context.Context) error {
				_, _, found, err := s.Get(ctx, "k")
				if found {
					t.Error("Get reported found")
				}
				return err
			})
			call("Insert", func(ctx context.Context) error {
				ok, err := s.Insert(ctx, "k", []byte("v"), time.Second)
				if ok {
					t.Error("Insert reported ok")
				}
				return err
			})
			call("Replace", func(ctx context.Context) error {
				ok, err := s.Replace(ctx, "k", []byte("v"), 1, 0)
				if ok {
					t.Error("Replace reported ok")
				}
				return err
			})
			call("Write", func(ctx context.Context) error {
				op := &cas.Op{Kind: cas.OpReplace, Key: "k", Data: []byte("v"), Ver: 1}
				err := s.Write(ctx, op)
				if op.Result.Written {
					t.Error("Write reported written")
				}
				return err
			})
			call("Batch", func(ctx context.Context) error {
				ops := []*cas.Op{{Kind: cas.OpGet, Key: "k"}, {Kind: cas.OpInsert, Key: "j", Data: []byte("v")}}
				if err := s.Batch(ctx, ops); err != nil {
					return err
				}
				for _, op := range ops {
					if op.Result.Err == nil {
						t.Errorf("Batch: the %v of %s has no error in an outage (result %+v)", op.Kind, op.Key, op.Result)
					}
				}
				return ops[0].Result.Err
			})
			call("Delete", func(ctx context.Context) error { return s.Delete(ctx, "k") })
			call("Load", s.Load)

			exec := cas.New(s)
			b := bucketgrid.NewManager(exec).Bucket("k", func(context.Context) (core.Config, error) {
				return core.NewConfig(core.Greedy(10, 10, time.Second))
			})
			call("TryConsume", func(ctx context.Context) error {
				_, err := b.TryConsume(ctx, 1)
				if err != nil && !errors.Is(err, cas.ErrStore) && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("TryConsume error %v is neither cas.ErrStore nor the deadline", err)
				}
				return err
			})
			if st := exec.Stats(); st.Conflicts != 0 {
				t.Errorf("executor counted %d conflicts in an outage, want 0", st.Conflicts)
			}
		})
	}
}
