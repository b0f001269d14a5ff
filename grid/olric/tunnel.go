package olric

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// Olric v0.7.4 has no TLS on its own port, but its client takes a dialer.
// With channel security on, a member's Olric reaches every other member
// through that member's owner channel: mutual TLS 1.3, the owner's
// certificate naming it, then the tunnel preamble, then Olric's own
// protocol (AUTH with the password first) to the owner's Olric port on its
// own host. No password, bucket state or routing table crosses the network
// in clear between members. Olric's port itself still listens on
// BindAddr:BindPort (its server has no hook for a listener), so it is
// guarded by the password alone and must be reachable by nothing but the
// member's own host: see docs/security.md at the repository's root.

// dialOlric is Olric's client dialer: this member's own Olric directly, any
// other member through its owner channel.
func (pp *peerPool) dialOlric(ctx context.Context, network, addr string) (net.Conn, error) {
	if addr == pp.m.name {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return olricConn{c}, nil
	}
	c, err := pp.dialSpecial(ctx, addr, tunnelPreamble)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return olricConn{c}, nil
}

// olricConn is a connection of Olric's client whose Close never fails.
// When a member leaves, Olric closes its client for the member's address
// and forgets the client only if closing returned no error; otherwise it
// keeps the closed client, and every later call to that address (a member
// restarted there included) fails with "client is closed" for good. A TLS
// connection whose peer is gone fails to send its close_notify alert and
// says so from Close, though the connection is closed all the same: so
// the error is dropped here, and Olric forgets the client.
type olricConn struct{ net.Conn }

// Close closes the connection and reports no error (see olricConn).
func (c olricConn) Close() error {
	c.Conn.Close()
	return nil
}

// serveTunnel carries a tunnelled connection to this member's Olric port
// and back until either side closes.
func (ch *channel) serveTunnel(c net.Conn) {
	m := ch.m
	c.SetDeadline(time.Time{})
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.ChannelIOTimeout)
	var d net.Dialer
	o, err := d.DialContext(ctx, "tcp", m.name)
	cancel()
	if err != nil {
		return
	}
	defer o.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		io.Copy(o, c)
		o.Close()
	})
	io.Copy(c, o)
	c.Close()
	wg.Wait()
}
