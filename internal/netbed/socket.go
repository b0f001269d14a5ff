package netbed

import (
	"context"
	"net"
)

// Listen opens a listener on host h (network and address as net.Listen;
// use h.Addr). It is the test process's own socket, inside h's namespace.
func (h *Host) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNamespace(h.NS, func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// ListenPacket opens a packet socket on host h, as net.ListenPacket.
func (h *Host) ListenPacket(network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := inNamespace(h.NS, func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}

// Dial connects from host h to addr, as net.Dialer.DialContext.
func (h *Host) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNamespace(h.NS, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}
