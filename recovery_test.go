package bucketgrid_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// logBuffer returns a logger writing text lines to the returned buffer.
func logBuffer() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

const secretKey = "sk_live_corrupt_0123456789"

// plantCorrupt writes bytes that do not decode as a bucket under key.
func plantCorrupt(t *testing.T, f *managerFixture, key string) {
	t.Helper()
	if err := f.store.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.store.Insert(context.Background(), key, []byte{wire.FormatVersion, 'B', 0xff, 0xff}, 0); !ok || err != nil {
		t.Fatalf("plant: %v %v", ok, err)
	}
}

// TestCorruptRecordReconstructed: by default (re-creating) a
// corrupt record is replaced by a new bucket, which then limits exactly; the
// replacement is counted and logged once per key, redacted.
func TestCorruptRecordReconstructed(t *testing.T) {
	logger, logs := logBuffer()
	f := newManagerFixture(t, bucketgrid.WithLogger(logger))
	plantCorrupt(t, f, secretKey)
	h := f.m.Bucket(secretKey, f.config(core.Greedy(2, 2, time.Hour))) // 2 per hour
	ctx := context.Background()
	served := 0
	for range 50 {
		ok, err := h.TryConsume(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			served++
		}
	}
	if served != 2 {
		t.Errorf("%d of 50 served under a 2-per-hour limit, want 2", served)
	}
	plantCorrupt(t, f, secretKey) // the same key again: counted, not logged again
	if _, err := h.TryConsume(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if s := f.m.Stats(); s.CorruptReplaced != 2 {
		t.Errorf("CorruptReplaced = %d, want 2", s.CorruptReplaced)
	}
	out := logs.String()
	if n := strings.Count(out, "corrupt stored bucket replaced"); n != 1 {
		t.Errorf("logged %d times, want once per key:\n%s", n, out)
	}
	if strings.Contains(out, secretKey) || !strings.Contains(out, core.RedactKey(secretKey)) {
		t.Errorf("log must name the key redacted, never raw:\n%s", out)
	}
}

// TestCorruptRecordRecoveryFail: under WithRecoveryFail a corrupt record is an
// error wrapping core.ErrCorruptState, and the record is left for an
// operator to see.
func TestCorruptRecordRecoveryFail(t *testing.T) {
	f := newManagerFixture(t, bucketgrid.WithRecoveryFail())
	plantCorrupt(t, f, "k")
	_, err := f.m.Bucket("k", f.config(core.Greedy(2, 2, time.Hour))).TryConsume(context.Background(), 1)
	if !errors.Is(err, core.ErrCorruptState) {
		t.Fatalf("err = %v, want ErrCorruptState", err)
	}
	data, _, _, _ := f.store.Get(context.Background(), "k")
	if !bytes.Equal(data, []byte{wire.FormatVersion, 'B', 0xff, 0xff}) || f.m.Stats().CorruptReplaced != 0 {
		t.Fatal("WithRecoveryFail replaced the corrupt record")
	}
}

// racingStore lets another writer replace a corrupt record with a valid
// bucket between the executor's read and its write, once.
type racingStore struct {
	cas.Store
	valid []byte
	raced bool
}

func (s *racingStore) Replace(ctx context.Context, k string, d []byte, v cas.Version, ttl time.Duration) (bool, error) {
	if !s.raced {
		s.raced = true
		_, cur, _, _ := s.Store.Get(ctx, k)
		if ok, err := s.Store.Replace(ctx, k, s.valid, cur, 0); !ok || err != nil {
			return false, errors.New("racingStore: could not race")
		}
	}
	return s.Store.Replace(ctx, k, d, v, ttl)
}

// TestCorruptReplacementNeverClobbers: the replacement is a compare-and-swap
// against the corrupt record; a valid bucket written meanwhile (by another
// process's replacement, say) is kept and used.
func TestCorruptReplacementNeverClobbers(t *testing.T) {
	f := newManagerFixture(t)
	plantCorrupt(t, f, "k")
	cfg, _ := core.NewConfig(core.Greedy(10, 1, time.Hour))
	other := core.NewState(cfg, f.clock.Now())
	other.TryConsume(7, f.clock.Now()) // another process already took 7
	rs := &racingStore{Store: f.store, valid: wire.AppendState(nil, &other)}
	m := bucketgrid.NewManager(cas.New(rs, cas.WithClock(f.clock)))
	h := m.Bucket("k", func(context.Context) (core.Config, error) { return cfg, nil })
	if ok, err := h.TryConsume(context.Background(), 1); !ok || err != nil {
		t.Fatalf("TryConsume: %v %v", ok, err)
	}
	if !rs.raced {
		t.Fatal("the race was not staged")
	}
	if n, _ := h.AvailableTokens(context.Background()); n != 2 {
		t.Fatalf("%d tokens left, want 2: the concurrent valid bucket (3 left) was overwritten", n)
	}
}

// TestDefaultExpiration: a Manager without WithExpiration expires an idle
// bucket a minute (the default margin) after it is full again, so idle clients do not
// pile up; keeping them (the zero wire.Expiry) must be asked for.
func TestDefaultExpiration(t *testing.T) {
	f := newManagerFixture(t)
	ctx := context.Background()
	cfg := f.config(core.Greedy(10, 10, time.Second))
	for i := range 100 {
		if _, err := f.m.Bucket(fmt.Sprintf("client-%d", i), cfg).TryConsume(ctx, 4); err != nil {
			t.Fatal(err)
		}
	}
	if ttl, ok := f.store.TTL("client-0"); !ok || ttl != 400*time.Millisecond+time.Minute {
		t.Fatalf("TTL %v, want the 400ms to full plus %v", ttl, time.Minute)
	}
	f.clock.Advance(400*time.Millisecond + time.Minute)
	if n := f.store.Len(); n != 0 {
		t.Fatalf("%d idle buckets still stored after refill plus margin, want 0", n)
	}
	never := newManagerFixture(t, bucketgrid.WithExpiration(wire.Expiry{}))
	if _, err := never.m.Bucket("k", cfg).TryConsume(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if ttl, ok := never.store.TTL("k"); !ok || ttl != 0 {
		t.Fatalf("the zero wire.Expiry: TTL %v, want none", ttl)
	}
}

// ruleStore holds only valid UTF-8 keys of at most 64 bytes, checked before
// any I/O.
type ruleStore struct{ cas.Store }

func (ruleStore) CheckKey(key string) error {
	if len(key) > 64 || !utf8.ValidString(key) {
		return core.InvalidKey(key, "longer than 64 bytes or not UTF-8")
	}
	return nil
}

// TestFitKeys: with WithFitKeys, keys a backend cannot hold get buckets of
// their own under digests no literal key reaches; without it they are
// refused with ErrInvalidKey before any I/O.
func TestFitKeys(t *testing.T) {
	f := newManagerFixture(t)
	ctx := context.Background()
	cfg := f.config(core.Greedy(1, 1, time.Hour))
	long := strings.Repeat("k", 200)
	bad := "caf\xe9"
	plain := bucketgrid.NewManager(cas.New(ruleStore{f.store}, cas.WithClock(f.clock)))
	for _, k := range []string{long, bad} {
		if _, err := plain.Bucket(k, cfg).TryConsume(ctx, 1); !errors.Is(err, core.ErrInvalidKey) {
			t.Fatalf("without WithFitKeys, key of %d bytes: %v, want ErrInvalidKey", len(k), err)
		}
	}
	if f.store.Len() != 0 {
		t.Fatal("an invalid key reached the store")
	}
	m := bucketgrid.NewManager(cas.New(ruleStore{f.store}, cas.WithClock(f.clock)), bucketgrid.WithFitKeys(64))
	for _, k := range []string{long, bad, core.DigestKey(long), "short"} {
		h := m.Bucket(k, cfg)
		if ok, err := h.TryConsume(ctx, 1); !ok || err != nil {
			t.Fatalf("key of %d bytes: first token %v %v: each key must have a full bucket of its own", len(k), ok, err)
		}
		if ok, _ := h.TryConsume(ctx, 1); ok {
			t.Fatalf("key of %d bytes: second token granted", len(k))
		}
	}
	if err := m.RemoveBucket(ctx, long); err != nil {
		t.Fatal(err)
	}
	if ok, _ := m.Bucket(long, cfg).TryConsume(ctx, 1); !ok {
		t.Fatal("RemoveBucket of a long key removed another bucket")
	}
	defer func() {
		if recover() == nil {
			t.Error("WithFitKeys below core.DigestKeyLen did not panic")
		}
	}()
	bucketgrid.NewManager(cas.New(f.store), bucketgrid.WithFitKeys(core.DigestKeyLen-1))
}
