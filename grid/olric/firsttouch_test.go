package olric

import (
	"context"
	"fmt"
	"testing"
)

// takeEach takes the one token of each key's bucket (capacity 1) through
// m and reports which were admitted.
func takeEach(t *testing.T, m *Member, keys []string) []bool {
	t.Helper()
	cfg := testBucket(1)
	var admitted []bool
	for _, k := range keys {
		resp, err := m.Execute(context.Background(), k, consumeReq(&cfg, 1))
		if err != nil {
			t.Fatal(err)
		}
		admitted = append(admitted, resp.Results[0].OK)
	}
	return admitted
}

func keysNamed(prefix string, n int) []string {
	var keys []string
	for i := range n {
		keys = append(keys, fmt.Sprintf("%s-%d", prefix, i))
	}
	return keys
}

// TestFirstTouchAlone: a member that never heard of another creates its
// buckets without asking Olric for them or for their partitions' lost
// marks (nothing but itself can have written either), and still answers
// exactly: the second check of every bucket is refused. Once its cache
// dropped an entry (a stripe full), an absent key is read from Olric again,
// and the dropped bucket keeps its consumption.
func TestFirstTouchAlone(t *testing.T) {
	m := startCluster(t, 1, nil)[0]
	keys := keysNamed("alone", 50)
	before := m.exec.olricReads.Load()
	for i, ok := range takeEach(t, m, keys) {
		if !ok {
			t.Fatalf("first check of %s refused", keys[i])
		}
	}
	if n := m.exec.olricReads.Load() - before; n != 0 {
		t.Errorf("a lone member read Olric %d times creating %d buckets; want 0", n, len(keys))
	}
	for i, ok := range takeEach(t, m, keys) {
		if ok {
			t.Fatalf("second check of %s admitted: a bucket of capacity 1 admitted twice", keys[i])
		}
	}

	// One stripe holding two cached buckets: the third drops one.
	small := startCluster(t, 1, func(c *Config) { c.Stripes, c.CacheEntries = 1, 2 })[0]
	keys = keysNamed("dropped", 3)
	for i, ok := range takeEach(t, small, keys) {
		if !ok {
			t.Fatalf("first check of %s refused", keys[i])
		}
	}
	before = small.exec.olricReads.Load()
	for i, ok := range takeEach(t, small, keys) {
		if ok {
			t.Fatalf("second check of %s admitted after the cache dropped an entry", keys[i])
		}
	}
	if small.exec.olricReads.Load() == before {
		t.Error("the cache dropped an entry, yet no check read Olric")
	}
}

// TestFirstTouchWithOthers: members that heard of each other read Olric
// for every bucket they create (another member may have written it), and
// answer exactly.
func TestFirstTouchWithOthers(t *testing.T) {
	ms := startCluster(t, 2, nil)
	keys := keysNamed("others", 20)
	before := ms[0].exec.olricReads.Load() + ms[1].exec.olricReads.Load()
	for i, ok := range takeEach(t, ms[0], keys) {
		if !ok {
			t.Fatalf("first check of %s refused", keys[i])
		}
	}
	if ms[0].exec.olricReads.Load()+ms[1].exec.olricReads.Load() == before {
		t.Error("members of a cluster of two created buckets without reading Olric")
	}
	for i, ok := range takeEach(t, ms[1], keys) {
		if ok {
			t.Fatalf("second check of %s admitted", keys[i])
		}
	}
}
