package olric

import (
	"crypto/tls"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/trust"
)

// TestDoorsThrottle makes failed handshakes on a secured member's owner
// channel from one source (127.0.0.3): after trust.DoorBurst of them, its
// connections are closed before any handshake, while a member from
// 127.0.0.1 still gets in. Before, every attempt got a handshake (Olric's
// password could be tried 12,000 times a second on its port).
func TestDoorsThrottle(t *testing.T) {
	s := newSecrets(t)
	m := startCluster(t, 1, s.secure(t))[0]
	wrong := newSecrets(t)
	attacker := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}
	try := func() (handshook bool) {
		raw, err := attacker.Dial("tcp", m.ChannelAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		raw.SetDeadline(time.Now().Add(10 * time.Second))
		c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{wrong.ca.leaf(t)}})
		c.Handshake() // the client's side completes before the member refuses its certificate
		var b [1]byte
		c.Read(b[:]) // the member's alert, or the end
		return c.ConnectionState().HandshakeComplete
	}
	refused := 0
	for i := range trust.DoorBurst + 4 {
		if !try() {
			refused++
			if i < trust.DoorBurst {
				t.Errorf("attempt %d refused before any handshake, burst %d", i, trust.DoorBurst)
			}
		}
	}
	if refused < 3 {
		t.Errorf("%d of the attempts beyond the burst were refused before a handshake, want ≥ 3", refused)
	}
	_, client, err := mutualTLS(s.ca.tlsConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := tlsDial(t, m.ChannelAddr(), dialTLS(client, "127.0.0.1")); c == nil || channelAttempt(t, c, "door-control") == "" {
		t.Error("a member from another source was refused")
	}
}

// TestDoorsVerifiedSource makes a member's verified handshake from
// 127.0.0.3, then trust.DoorBurst+4 failed handshakes from the same address (an
// attacker on the member's host or behind its NAT), and checks that the
// member still gets in from there. Before the throttle knew verified sources, the attacker's
// failures shut it out for about 20 s.
func TestDoorsVerifiedSource(t *testing.T) {
	s := newSecrets(t)
	m := startCluster(t, 1, s.secure(t))[0]
	wrong := newSecrets(t)
	from := net.IPv4(127, 0, 0, 3)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}
	member := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{s.ca.leafFor(t, from)}}
	dial := func(cfg *tls.Config) *tls.Conn {
		raw, err := d.Dial("tcp", m.ChannelAddr())
		if err != nil {
			t.Fatal(err)
		}
		c := tls.Client(raw, cfg)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Handshake()
		return c
	}
	if got := channelAttempt(t, dial(member), "door-member"); got == "" {
		t.Fatal("the member got no answer before the attack")
	}
	attacker := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{wrong.ca.leaf(t)}}
	for range trust.DoorBurst + 4 {
		c := dial(attacker)
		var b [1]byte
		c.Read(b[:])
		c.Close()
	}
	owed := m.trust.doors.Owed(netip.AddrFrom4([4]byte{127, 0, 0, 3}), m.mono())
	if owed <= (trust.DoorBurst-1)*trust.DoorCost {
		t.Fatalf("the address owes %v, within its burst: the test proves nothing", owed)
	}
	if got := channelAttempt(t, dial(member), "door-member"); got == "" {
		t.Error("the member was shut out by the attacker's failures from its address")
	}
}
