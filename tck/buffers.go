package tck

import (
	"bytes"
	"sync"
)

// checkBuffers checks who owns the bytes: a slice Get returns is the
// caller's and stays as it was through later calls, and a slice passed to
// Insert or Replace is the caller's again once the call returns — the
// executor reuses its buffers. Sequential, so it catches a shared buffer
// deterministically; the concurrent reads at the end give -race a chance to
// see one that is shared without a lock.
func checkBuffers(e *env) {
	s, ctx := e.store, e.ctx
	k1, k2, k3 := e.key("buf-1"), e.key("buf-2"), e.key("buf-3")
	v1 := []byte{1, 1, 1, 1, 1, 0, 0}
	v2 := []byte{2, 2, 0}
	v3 := []byte{3, 3, 3, 3, 3, 3, 3, 3, 3, 0}

	// a written buffer is the caller's as soon as the call returns
	buf := append([]byte(nil), v1...)
	if ok, err := s.Insert(ctx, k1, buf, 0); err != nil || !ok {
		e.Fatalf("Insert: ok=%v err=%v", ok, err)
	}
	scribble(buf)
	got, _, found, err := s.Get(ctx, k1)
	if err != nil || !found {
		e.Fatalf("Get after Insert: found=%v err=%v", found, err)
	}
	if !bytes.Equal(got, v1) {
		e.Fatalf("the caller overwrote the slice it had passed to Insert, after Insert returned, and Get then returned %s: the store keeps the caller's slice instead of a copy, so stored buckets change when the executor reuses its buffers. Copy the bytes before Insert returns (or let the driver serialise them during the call)", mismatch(got, v1))
	}
	buf = append([]byte(nil), v2...)
	if ok, err := s.Insert(ctx, k2, []byte{9, 0}, 0); err != nil || !ok {
		e.Fatalf("Insert: ok=%v err=%v", ok, err)
	}
	_, ver2, _, err := s.Get(ctx, k2)
	if err != nil {
		e.Fatalf("Get: %v", err)
	}
	if ok, err := s.Replace(ctx, k2, buf, ver2, 0); err != nil || !ok {
		e.Fatalf("Replace: ok=%v err=%v", ok, err)
	}
	scribble(buf)
	if got, _, _, err := s.Get(ctx, k2); err != nil || !bytes.Equal(got, v2) {
		e.Fatalf("the caller overwrote the slice it had passed to Replace, after Replace returned, and Get then returned %s (err %v): the store keeps the caller's slice. Copy the bytes before Replace returns", mismatch(got, v2), err)
	}

	// a returned buffer is the caller's, through any later call
	g1, _, _, err := s.Get(ctx, k1)
	if err != nil {
		e.Fatalf("Get: %v", err)
	}
	later := []struct {
		what string
		do   func() error
	}{
		{"a Get of another key", func() error { _, _, _, err := s.Get(ctx, k2); return err }},
		{"a Get of the same key", func() error { _, _, _, err := s.Get(ctx, k1); return err }},
		{"an Insert of another key", func() error { _, err := s.Insert(ctx, k3, v3, 0); return err }},
		{"a Replace of the same key", func() error {
			_, ver, _, err := s.Get(ctx, k1)
			if err == nil {
				_, err = s.Replace(ctx, k1, v3, ver, 0)
			}
			return err
		}},
		{"a Delete of another key", func() error { return s.Delete(ctx, k3) }},
	}
	for _, l := range later {
		if err := l.do(); err != nil {
			e.Fatalf("%s: %v", l.what, err)
		}
		if !bytes.Equal(g1, v1) {
			e.Fatalf("a slice Get had returned changed during %s: it now holds %s. Get must return bytes the caller owns (a fresh copy), not a buffer the store reuses or a view of the stored value — two keys' states would mix, or one bucket's state change under the executor", l.what, mismatch(g1, v1))
		}
	}
	// the caller may write into what Get returned
	g3, _, _, err := s.Get(ctx, k1)
	if err != nil {
		e.Fatalf("Get: %v", err)
	}
	scribble(g3)
	if again, _, _, err := s.Get(ctx, k1); err != nil || !bytes.Equal(again, v3) {
		e.Errorf("the caller wrote into the slice Get returned, and the stored value changed (now %s): Get must return a copy", mismatch(again, v3))
	}

	// concurrent readers of distinct keys, each checking its own bytes
	keys := [][]byte{v1, v2, v3, {4, 0}}
	for i, v := range keys {
		k := e.key("buf-c" + string(rune('a'+i)))
		if ok, err := s.Insert(ctx, k, v, 0); err != nil || !ok {
			e.Fatalf("Insert: ok=%v err=%v", ok, err)
		}
	}
	var wg sync.WaitGroup
	for i, v := range keys {
		k := e.key("buf-c" + string(rune('a'+i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				got, _, _, err := s.Get(ctx, k)
				if err != nil {
					e.Errorf("concurrent Get: %v", err)
					return
				}
				if !bytes.Equal(got, v) {
					e.Errorf("concurrent Gets of distinct keys: one returned %s: Gets share a buffer", mismatch(got, v))
					return
				}
			}
		}()
	}
	wg.Wait()
}

// scribble overwrites b, as a caller reusing its buffer would.
func scribble(b []byte) {
	for i := range b {
		b[i] = 0xEE
	}
}
