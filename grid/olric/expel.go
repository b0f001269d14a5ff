package olric

import (
	"crypto/x509"
	"fmt"
	"log"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Revocation. A member holds, for each node it admitted, the certificate
// the node proved (trust.verify), and for each owner-channel connection it
// serves, the certificate of its caller (trust.callers). When its
// revocation list changes (Config.RevokedFile, re-read by watchCerts) it
// acts on every listed certificate at once:
//   - new connections from or to its holder fail their TLS handshake
//     (mutualTLS), so its requests, tunnelled Olric traffic and identity
//     answers are refused, and no member admits its gossip records again;
//   - the connections its holder opened are closed;
//   - the member forgets the holder's proof and sends it no gossip (the
//     gossip transport, gossipNet): its probes of the holder fail, and the
//     holder's refutations are refused as unproven, so gossip declares it
//     dead after its suspicion timeout, Olric drops it from the member
//     list and its partitions move to the others;
//   - the member takes in no gossip from the holder either: gossipNet
//     drops every packet from its gossip address, and a state sync by
//     which a node joins is refused while it lists the holder alive
//     (NotifyMerge). The holder, which hears from nobody, suspects the
//     others and declares them dead; before, its suspect and dead
//     messages reached them (the Alive delegate vets only alive records),
//     a member it declared dead was declared dead by the others too, and
//     its partitions moved away and back with buckets that forgot
//     consumption (TestRevokedGossipIgnored). What it cannot drop: a
//     periodic state sync over TCP (memberlist asks no delegate about
//     one, and its connection comes from no known address), in which a
//     death is only a suspicion, for the accused to refute; the holder
//     syncs only with members it counts alive, and it stops counting
//     them once its probes of them fail.

// logf writes a line to Config.LogOutput.
func (m *Member) logf(format string, args ...any) {
	log.New(m.cfg.LogOutput, "bucketgrid/olric: ", log.LstdFlags).Printf(format, args...)
}

// provenCert is the certificate a node proved and its gossip address.
type provenCert struct {
	leaf *x509.Certificate
	addr string
}

// expelRevoked acts on the revocation list just installed (see above).
func (t *guard) expelRevoked() {
	s := t.creds.store
	var closing []net.Conn
	t.callers.Range(func(k, v any) bool {
		if s.IsRevoked(v.(*x509.Certificate)) {
			closing = append(closing, k.(net.Conn))
		}
		return true
	})
	for _, c := range closing {
		c.Close()
	}
	blocked := map[string]string{}
	var names []string
	t.mu.Lock()
	for name, p := range t.certs {
		if s.IsRevoked(p.leaf) {
			delete(t.verified, name)
			blocked[p.addr] = name
			names = append(names, name)
		}
	}
	t.mu.Unlock()
	t.blocked.Store(&blocked)
	if len(names) > 0 || len(closing) > 0 {
		t.m.logf("revocation list: expelling %v, %d connections closed", names, len(closing))
	}
}

// gossipBlocked reports whether addr is the gossip address of a node whose
// certificate is revoked.
func (t *guard) gossipBlocked(addr string) bool {
	_, ok := t.revokedAt(addr)
	return ok
}

// revokedAt returns the name of the node with a revoked certificate whose
// gossip address is addr, if there is one.
func (t *guard) revokedAt(addr string) (string, bool) {
	b := t.blocked.Load()
	if b == nil {
		return "", false
	}
	name, ok := (*b)[addr]
	return name, ok
}

// refuseRevoked counts and logs (within the limits of unverified.go) a
// refusal of gossip of the revoked node called name, from addr.
func (t *guard) refuseRevoked(name, addr string) {
	t.failedProof(name, addr, errRevoked)
	t.count(name, addr, errRevoked)
}

// gossipNet is memberlist's network transport sending nothing to the
// gossip addresses of revoked nodes and taking in no packet from them (see
// above).
type gossipNet struct {
	*memberlist.NetTransport
	t *guard
	// packets carries the packets received but those from revoked
	// nodes' gossip addresses (filter); done is closed when Shutdown
	// begins, stopped once the transport's listeners ended, and wg waits
	// for filter.
	packets       chan *memberlist.Packet
	done, stopped chan struct{}
	wg            sync.WaitGroup
	once          sync.Once
}

// newGossipNet binds the member's gossip address.
func (t *guard) newGossipNet() (*gossipNet, error) {
	cfg := &t.m.cfg
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{cfg.MemberlistBindAddr},
		BindPort:  cfg.MemberlistBindPort,
		Logger:    log.New(cfg.LogOutput, "memberlist: ", log.LstdFlags),
	})
	if err != nil {
		return nil, fmt.Errorf("bucketgrid/olric: gossip: %w", err)
	}
	g := &gossipNet{NetTransport: nt, t: t, packets: make(chan *memberlist.Packet),
		done: make(chan struct{}), stopped: make(chan struct{})}
	g.wg.Go(g.filter)
	return g, nil
}

// filter passes the packets the transport receives to memberlist, but for
// those sent from the gossip address of a revoked node (see above). It
// reads until the transport's listeners ended (stopped), dropping what
// comes once Shutdown began (done): a listener blocked on a packet nobody
// takes would hold the transport's Shutdown forever.
func (g *gossipNet) filter() {
	in := g.NetTransport.PacketCh()
	for {
		var p *memberlist.Packet
		select {
		case <-g.stopped:
			return
		case p = <-in:
		}
		if p.From != nil {
			if name, ok := g.t.revokedAt(p.From.String()); ok {
				g.t.refuseRevoked(name, p.From.String())
				continue
			}
		}
		select {
		case g.packets <- p:
		case <-g.done:
		}
	}
}

// PacketCh implements memberlist.Transport: the packets filter let through.
func (g *gossipNet) PacketCh() <-chan *memberlist.Packet { return g.packets }

// refuse returns the error of a send (op "write" over "udp") or dial (op
// "dial" over "tcp") to addr if it is blocked, as the network would: a
// failure memberlist counts against the node, so that it is suspected.
func (g *gossipNet) refuse(network, op, addr string) error {
	if !g.t.gossipBlocked(addr) {
		return nil
	}
	a, _ := net.ResolveUDPAddr("udp", addr)
	return &net.OpError{Op: op, Net: network, Addr: a, Err: errRevoked}
}

// WriteTo implements memberlist.Transport.
func (g *gossipNet) WriteTo(b []byte, addr string) (time.Time, error) {
	if err := g.refuse("udp", "write", addr); err != nil {
		return time.Time{}, err
	}
	return g.NetTransport.WriteTo(b, addr)
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (g *gossipNet) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if err := g.refuse("udp", "write", a.Addr); err != nil {
		return time.Time{}, err
	}
	return g.NetTransport.WriteToAddress(b, a)
}

// DialTimeout implements memberlist.Transport.
func (g *gossipNet) DialTimeout(addr string, d time.Duration) (net.Conn, error) {
	if err := g.refuse("tcp", "dial", addr); err != nil {
		return nil, err
	}
	return g.NetTransport.DialTimeout(addr, d)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (g *gossipNet) DialAddressTimeout(a memberlist.Address, d time.Duration) (net.Conn, error) {
	if err := g.refuse("tcp", "dial", a.Addr); err != nil {
		return nil, err
	}
	return g.NetTransport.DialAddressTimeout(a, d)
}

// Shutdown implements memberlist.Transport; it may be called more than
// once (by memberlist, and by the member for a memberlist never created).
func (g *gossipNet) Shutdown() error {
	g.once.Do(func() {
		close(g.done)
		g.NetTransport.Shutdown()
		close(g.stopped)
		g.wg.Wait()
	})
	return nil
}

// closeNet shuts the gossip transport down, if there is one.
func (t *guard) closeNet() {
	if g := t.net; g != nil {
		g.Shutdown()
	}
}
