package trust

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Failed handshakes on the owner channel (no certificate of the cluster CA,
// TLS below 1.3, bytes that are not the channel's) are bounded per source
// address: each failure costs its source DoorCost, a source may owe
// DoorBurst failures' worth, and while it owes more its connections are
// closed as soon as they are accepted, before any handshake. An attacker
// gets DoorBurst attempts, then one a second, from each address it holds.
const (
	DoorCost  = time.Second
	DoorBurst = 16
)

// A source address from which a member completed a verified handshake
// (mutual TLS, its certificate naming the address) within DoorTrust is
// never closed before its handshake, whatever it owes: an attacker's
// failures from a member's host or NAT address cannot shut the member out
// (what that leaves an attacker: "Trust" in grid/olric's package
// documentation).
const DoorTrust = time.Hour

// Throttle tracks failed handshakes per source IP address, as a generic
// cell rate algorithm: due is when the source's debt will have drained.
// Times are the caller's monotonic nanoseconds. A Throttle is safe for
// concurrent use.
type Throttle struct {
	mu      sync.Mutex
	due     map[netip.Addr]int64
	trusted map[netip.Addr]int64 // the last verified handshake
}

// NewThrottle returns a Throttle in which no source owes anything.
func NewThrottle() *Throttle {
	return &Throttle{due: map[netip.Addr]int64{}, trusted: map[netip.Addr]int64{}}
}

// Verified records a verified handshake from a's source at now.
func (d *Throttle) Verified(a net.Addr, now int64) {
	ip, ok := Source(a)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.trusted[ip]; !ok && len(d.trusted) >= Sources {
		for k, at := range d.trusted {
			if now-at >= int64(DoorTrust) {
				delete(d.trusted, k)
			}
		}
		if len(d.trusted) >= Sources {
			return // members are far fewer: this is not one
		}
	}
	d.trusted[ip] = now
}

// Source returns the IP address of a connection's remote end.
func Source(a net.Addr) (netip.Addr, bool) {
	if t, ok := a.(*net.TCPAddr); ok {
		ip, ok := netip.AddrFromSlice(t.IP)
		return ip.Unmap(), ok
	}
	ap, err := netip.ParseAddrPort(a.String())
	return ap.Addr().Unmap(), err == nil
}

// Admit reports whether a new connection from a may try its handshake at
// now.
func (d *Throttle) Admit(a net.Addr, now int64) bool {
	ip, ok := Source(a)
	if !ok {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	due, ok := d.due[ip]
	if !ok || due-now <= int64(DoorBurst-1)*int64(DoorCost) {
		return true
	}
	at, ok := d.trusted[ip]
	return ok && now-at < int64(DoorTrust)
}

// Failed charges a failed handshake to a's source at now.
func (d *Throttle) Failed(a net.Addr, now int64) {
	ip, ok := Source(a)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	due, ok := d.due[ip]
	if !ok && len(d.due) >= Sources {
		d.forget(now)
	}
	d.due[ip] = max(due, now) + int64(DoorCost)
}

// Owed returns how much ip owes at now (0 when nothing).
func (d *Throttle) Owed(ip netip.Addr, now int64) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return max(time.Duration(d.due[ip]-now), 0)
}

// forget drops the sources whose debt has drained, or else the one that
// owes least. Called with mu held.
func (d *Throttle) forget(now int64) {
	var least netip.Addr
	leastDue := int64(1<<63 - 1)
	for ip, due := range d.due {
		if due <= now {
			delete(d.due, ip)
			continue
		}
		if due < leastDue {
			least, leastDue = ip, due
		}
	}
	if len(d.due) >= Sources {
		delete(d.due, least)
	}
}
