package bucketgrid

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/bucketgrid/bucketgrid/core"
)

// TestLocalCheckWritesOneLine: a check writes the mutex and the state of
// the bucket's bandwidth. For a single-bandwidth bucket from NewLocal both
// must lie within the Local's first 32 bytes, so that a Local on its own
// allocation (whose size class aligns it to 32 bytes) keeps them on one
// 64-byte cache line, and a check under contention moves one line between
// cores instead of two.
func TestLocalCheckWritesOneLine(t *testing.T) {
	cfg, err := core.NewConfig(core.Greedy(10, 10, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLocal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if &l.b.Bands[0] != &l.one[0] {
		t.Fatal("NewLocal: a single bandwidth's state is not inside the Local")
	}
	other, _ := core.NewConfig(core.Greedy(1000, 1000, time.Second))
	if err := l.ReplaceConfiguration(context.Background(), other, core.InheritAsIs); err != nil {
		t.Fatal(err)
	}
	if &l.b.Bands[0] != &l.one[0] || l.b.Bands[0].Size != 10 {
		t.Fatalf("after a replacement, the single bandwidth's state is not inside the Local, or lost its 10 tokens: %+v", l.b.Bands)
	}
	var z Local
	if end := unsafe.Offsetof(z.mu) + unsafe.Sizeof(z.mu); end > 32 {
		t.Fatalf("the mutex ends at byte %d, beyond 32", end)
	}
	if end := unsafe.Offsetof(z.one) + unsafe.Sizeof(z.one); end > 32 {
		t.Fatalf("the bandwidth state ends at byte %d, beyond 32", end)
	}
	for range 64 {
		l, _ := NewLocal(cfg)
		if p := uintptr(unsafe.Pointer(l)); p%32 != 0 {
			t.Fatalf("NewLocal's bucket at %#x is not 32-byte aligned (Local is %d bytes)", p, unsafe.Sizeof(z))
		}
	}
}
