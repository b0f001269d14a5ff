package olric

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Failed handshakes on the owner channel (no certificate of the cluster CA,
// TLS below 1.3, bytes that are not the channel's) are bounded per source
// address: each failure costs its source doorCost, a source may owe
// doorBurst failures' worth, and while it owes more its connections are
// closed as soon as they are accepted, before any handshake. An attacker
// gets doorBurst attempts, then one a second, from each address it holds.
const (
	doorCost    = time.Second
	doorBurst   = 16
	doorSources = 4096 // sources remembered; beyond, the oldest debt is forgotten
)

// A source address from which a member completed a verified handshake
// (mutual TLS, its certificate naming the address) within doorTrust is
// never closed before its handshake, whatever it owes: an attacker's
// failures from a member's host or NAT address cannot shut the member out.
// The attacker there gets handshakes too, as many at once as the
// handshaking limit allows (silent ones are dropped first, see serve).
const doorTrust = time.Hour

// doors tracks failed handshakes per source IP address, as a generic cell
// rate algorithm: due is when the source's debt will have drained.
type doors struct {
	mu      sync.Mutex
	due     map[netip.Addr]int64 // m.mono nanoseconds
	trusted map[netip.Addr]int64 // the last verified handshake, m.mono nanoseconds
}

func newDoors() *doors {
	return &doors{due: map[netip.Addr]int64{}, trusted: map[netip.Addr]int64{}}
}

// verified records a verified handshake from a's source at now.
func (d *doors) verified(a net.Addr, now int64) {
	ip, ok := source(a)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.trusted[ip]; !ok && len(d.trusted) >= doorSources {
		for k, at := range d.trusted {
			if now-at >= int64(doorTrust) {
				delete(d.trusted, k)
			}
		}
		if len(d.trusted) >= doorSources {
			return // members are far fewer: this is not one
		}
	}
	d.trusted[ip] = now
}

// source returns the IP address of a connection's remote end.
func source(a net.Addr) (netip.Addr, bool) {
	if t, ok := a.(*net.TCPAddr); ok {
		ip, ok := netip.AddrFromSlice(t.IP)
		return ip.Unmap(), ok
	}
	ap, err := netip.ParseAddrPort(a.String())
	return ap.Addr().Unmap(), err == nil
}

// admit reports whether a new connection from a may try its handshake at
// now.
func (d *doors) admit(a net.Addr, now int64) bool {
	ip, ok := source(a)
	if !ok {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	due, ok := d.due[ip]
	if !ok || due-now <= int64(doorBurst-1)*int64(doorCost) {
		return true
	}
	at, ok := d.trusted[ip]
	return ok && now-at < int64(doorTrust)
}

// failed charges a failed handshake to a's source at now.
func (d *doors) failed(a net.Addr, now int64) {
	ip, ok := source(a)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	due, ok := d.due[ip]
	if !ok && len(d.due) >= doorSources {
		d.forget(now)
	}
	d.due[ip] = max(due, now) + int64(doorCost)
}

// forget drops the sources whose debt has drained, or else the one that
// owes least. Called with mu held.
func (d *doors) forget(now int64) {
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
	if len(d.due) >= doorSources {
		delete(d.due, least)
	}
}
