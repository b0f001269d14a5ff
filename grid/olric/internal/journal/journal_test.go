package journal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestBound fills the journal past Max: the oldest keys go first, and a
// rewritten key keeps its place.
func TestBound(t *testing.T) {
	var j Journal
	for i := range Max {
		j.Put(fmt.Sprint(i), []byte{1}, Branch{}, 0, 0)
	}
	j.Put("0", []byte{2}, Branch{}, 0, 0) // rewritten: still the oldest
	j.Put("new", []byte{3}, Branch{}, 0, 0)
	if n := j.Len(); n != Max {
		t.Fatalf("Len %d, want %d", n, Max)
	}
	if _, ok := j.entries["0"]; ok {
		t.Error("the oldest key survived the bound")
	}
	if _, ok := j.entries["1"]; !ok {
		t.Error("the second oldest key was dropped too")
	}
	j.Drop("new")
	if n := j.Len(); n != Max-1 {
		t.Fatalf("Len after Drop %d, want %d", n, Max-1)
	}
}

// TestShip ships a journal whose merges fail for one key: the others leave
// with the TTL they have left in their payload, the expired one leaves
// without a merge, the failed one stays and ships the next time.
func TestShip(t *testing.T) {
	var j Journal
	const now = 1000
	j.Put("forever", []byte("f"), Branch{}, 0, now)
	j.Put("lives", []byte("l"), Branch{}, 500, now)
	j.Put("expired", []byte("e"), Branch{}, 100, now)
	j.Put("fails", []byte("x"), Branch{}, 0, now)
	if !j.StartShipping() {
		t.Fatal("a journal with buckets did not start shipping")
	}
	if j.StartShipping() {
		t.Fatal("a journal being shipped started shipping again")
	}
	var mu sync.Mutex
	got := map[string]string{}
	fail := errors.New("owner unreachable")
	j.Ship(context.Background(), func() int64 { return now + 200 }, func(key string, payload []byte) error {
		ttl, n := binary.Uvarint(payload)
		mu.Lock()
		got[key] = fmt.Sprintf("%d %s", ttl, payload[n:])
		mu.Unlock()
		if key == "fails" {
			return fail
		}
		return nil
	})
	j.DoneShipping()
	want := map[string]string{"forever": "0 f", "lives": "300 l", "fails": "0 x"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("merged %v, want %v", got, want)
	}
	if n := j.Len(); n != 1 {
		t.Fatalf("%d buckets left, want the failed one", n)
	}
	if !j.StartShipping() {
		t.Fatal("the failed bucket did not ship again")
	}
	j.Ship(context.Background(), func() int64 { return now }, func(string, []byte) error { return nil })
	j.DoneShipping()
	if n, o := j.Len(), len(j.order); n != 0 || o != 0 {
		t.Errorf("after a good ship: %d buckets, %d in order", n, o)
	}
	if j.StartShipping() {
		t.Error("an empty journal started shipping")
	}
}

// TestShipKeepsRewritten rewrites a bucket while its merge runs: the newer
// state stays for the next ship.
func TestShipKeepsRewritten(t *testing.T) {
	var j Journal
	j.Put("k", []byte("old"), Branch{}, 0, 0)
	j.Ship(context.Background(), func() int64 { return 0 }, func(key string, _ []byte) error {
		j.Put(key, []byte("new"), Branch{}, 0, 0)
		return nil
	})
	if e, ok := j.entries["k"]; !ok || string(e.state) != "new" {
		t.Errorf("rewritten bucket: %q %v, want it kept", e.state, ok)
	}
}

// TestShipStopsWithContext ships with an ended context: nothing is handed
// out and everything stays.
func TestShipStopsWithContext(t *testing.T) {
	var j Journal
	j.Put("k", []byte("s"), Branch{}, 0, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	j.Ship(ctx, func() int64 { return 0 }, func(string, []byte) error {
		t.Error("merged after the context ended")
		return nil
	})
	if j.Len() != 1 {
		t.Error("the bucket left although it was never merged")
	}
}
