package trust

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestThrottleBudget(t *testing.T) {
	d := NewThrottle()
	a := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}
	b := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 1}
	now := int64(time.Hour)
	for i := range DoorBurst {
		if !d.Admit(a, now) {
			t.Fatalf("refused after %d failures, burst %d", i, DoorBurst)
		}
		d.Failed(a, now)
	}
	if d.Admit(a, now) {
		t.Fatal("admitted after the burst")
	}
	if !d.Admit(b, now) {
		t.Fatal("another source refused")
	}
	if d.Admit(a, now+int64(DoorCost)-1) || !d.Admit(a, now+int64(DoorCost)) {
		t.Fatal("one attempt more per DoorCost")
	}
	if got, want := d.Owed(netip.AddrFrom4([4]byte{10, 0, 0, 1}), now), DoorBurst*DoorCost; got != want {
		t.Fatalf("owed %v, want %v", got, want)
	}
	// The table stays bounded.
	for i := range Sources + 10 {
		d.Failed(&net.TCPAddr{IP: net.IPv4(10, 1, byte(i>>8), byte(i)), Port: 1}, now)
	}
	if n := len(d.due); n > Sources {
		t.Fatalf("%d sources remembered, bound %d", n, Sources)
	}
}

// TestThrottleVerifiedSource: a source that completed a verified
// handshake within DoorTrust is admitted whatever it owes, and no longer
// once DoorTrust has passed.
func TestThrottleVerifiedSource(t *testing.T) {
	d := NewThrottle()
	a := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 3), Port: 1}
	now := int64(time.Hour)
	d.Verified(a, now)
	for range DoorBurst + 4 {
		d.Failed(a, now)
	}
	if !d.Admit(a, now) {
		t.Fatal("a verified source was refused for its debt")
	}
	later := now + int64(DoorTrust)
	for range DoorBurst + 4 {
		d.Failed(a, later)
	}
	if d.Admit(a, later) {
		t.Fatal("a source verified DoorTrust ago is still trusted while it owes")
	}
}
