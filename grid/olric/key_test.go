package olric

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/olric-data/olric/hasher"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// TestKeyLength checks the key rule: keys of up to MaxKeyLen bytes (any
// bytes) work on local and remote owners; a longer key fails at once with
// a *core.KeyError that does not show the key, before any I/O (even with a
// context that has ended) and through a Manager as core.ErrInvalidKey.
func TestKeyLength(t *testing.T) {
	ms := startCluster(t, 2, nil)
	cfg := testBucket(10)
	ctx := context.Background()
	for _, k := range []string{"", "\xff\x00\xfe", strings.Repeat("k", MaxKeyLen), strings.Repeat("é", MaxKeyLen/2)} {
		for _, m := range ms {
			if _, err := m.Execute(ctx, k, consumeReq(&cfg, 1)); err != nil {
				t.Fatalf("key of %d bytes via %s: %v", len(k), m.Name(), err)
			}
		}
		r, err := ms[0].Execute(ctx, k, availableReq(&cfg))
		if err != nil || r.Results[0].Tokens != 8 {
			t.Fatalf("key of %d bytes: %v %v, want 8 tokens", len(k), r.Results, err)
		}
	}
	long := strings.Repeat("s3cr3t-api-key-", 18)[:MaxKeyLen+1]
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for _, m := range ms {
		for _, c := range []context.Context{ctx, ended} {
			_, err := m.Execute(c, long, consumeReq(&cfg, 1))
			var ke *core.KeyError
			if !errors.Is(err, core.ErrInvalidKey) || !errors.As(err, &ke) || ke.Len != len(long) {
				t.Fatalf("Execute with a key of %d bytes: %v, want a *core.KeyError", len(long), err)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the error shows the key: %v", err)
			}
			if err := m.Remove(c, long); !errors.Is(err, core.ErrInvalidKey) {
				t.Errorf("Remove: %v, want ErrInvalidKey", err)
			}
		}
	}
	b := bucketgrid.NewManager(ms[0]).Bucket(long, func(context.Context) (core.Config, error) { return cfg, nil })
	if _, err := b.TryConsume(ctx, 1); !errors.Is(err, core.ErrInvalidKey) {
		t.Errorf("through a Manager: %v, want ErrInvalidKey", err)
	}

	// An owner refuses such a key from the channel too (a caller would
	// not send it), with an error answer, and keeps the connection.
	req := wire.AppendRequest(nil, new(consumeReq(&cfg, 1)))
	f := append(frame.Preamble[:], requestFrame(1, frame.KindExecute, time.Second, long, req)...)
	f = append(f, requestFrame(2, frame.KindExecute, time.Second, "short", req)...)
	c, r := openChannel(t, ms[0], f)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var pre [len(frame.Preamble)]byte
	io.ReadFull(r, pre[:])
	fr := frame.NewReader(r, nil, 0, 0)
	answers := map[uint64]byte{}
	for range 2 {
		body, err := fr.Next()
		if err != nil {
			t.Fatal(err)
		}
		id, kind, payload, _ := frame.Parse(body)
		answers[id] = kind
		if id == 1 && strings.Contains(string(payload), "s3cr3t") {
			t.Errorf("the error answer shows the key: %s", payload)
		}
	}
	if answers[1] != frame.KindError {
		t.Errorf("long key answered with kind %d, want an error", answers[1])
	}
	// "short" may belong to the other member: either answer is fine, but
	// an answer it gets.
	if k := answers[2]; k != frame.KindOK && k != frame.KindNotOwner {
		t.Errorf("next request answered with kind %d", k)
	}
}

// TestHashIsOlrics checks that a member places a key in the partition Olric
// does: xxhash64 of the DMap's name followed by the key, with Olric's
// default hasher, for keys of every length up to MaxKeyLen.
func TestHashIsOlrics(t *testing.T) {
	m := &Member{cfg: Config{DMap: "bucketgrid.buckets", PartitionCount: 271}}
	h := hasher.NewDefaultHasher()
	for n := range MaxKeyLen + 1 {
		key := strings.Repeat(string(rune('a'+n%26)), n)
		want := h.Sum64([]byte(m.cfg.DMap + key))
		if got := m.hash(key); got != want {
			t.Fatalf("key of %d bytes: hash %x, Olric's %x", n, got, want)
		}
		if got := m.Partition(key); got != want%271 {
			t.Fatalf("key of %d bytes: partition %d, Olric's %d", n, got, want%271)
		}
	}
}
