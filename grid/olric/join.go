package olric

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Join errors returned by Start.
var (
	// ErrJoin: Peers was not empty and no peer let the member in within
	// JoinTimeout. The member did not start; it never forms a cluster of
	// its own when told to join one.
	ErrJoin = errors.New("bucketgrid/olric: could not join the cluster")
	// ErrNotGossipPort accompanies ErrJoin when the peers answer Olric's
	// protocol: Peers was given Olric's BindPort, and takes the gossip port
	// (MemberlistBindPort, BindPort+2 by default).
	ErrNotGossipPort = errors.New("bucketgrid/olric: a peer address is an Olric port, not a gossip port")
)

// joinPeers returns the peers to join now: Peers and what Discover finds,
// without this member's own gossip address and without repeats. Start
// calls it, and so does whatever joins the cluster again.
func (c *Config) joinPeers(ctx context.Context) ([]string, error) {
	peers := c.otherPeers(c.Peers)
	if c.Discover == nil {
		return peers, nil
	}
	found, err := c.Discover(ctx)
	if err != nil {
		return nil, fmt.Errorf("bucketgrid/olric: discovering peers: %w", err)
	}
	for _, p := range c.otherPeers(found) {
		if !slices.Contains(peers, p) {
			peers = append(peers, p)
		}
	}
	return peers, nil
}

// otherPeers returns peers without this member's own gossip address.
func (c *Config) otherPeers(peers []string) []string {
	self := net.JoinHostPort(c.MemberlistBindAddr, strconv.Itoa(c.MemberlistBindPort))
	var out []string
	for _, p := range peers {
		if h, port, err := net.SplitHostPort(p); err == nil && net.JoinHostPort(h, port) == self {
			continue
		}
		out = append(out, p)
	}
	return out
}

// probeGossip asks every peer a RESP PING, Olric's protocol, and returns
// an error matching ErrJoin and ErrNotGossipPort if every one of them
// answers it: the member was pointed at Olric's ports and would wait for
// JoinTimeout in vain. A gossip port answers nothing (memberlist closes the
// connection), nor does an address where nothing listens.
func probeGossip(ctx context.Context, peers []string) error {
	var wg sync.WaitGroup
	resp := make([]bool, len(peers))
	for i, p := range peers {
		wg.Go(func() { resp[i] = speaksRESP(ctx, p) })
	}
	wg.Wait()
	for _, r := range resp {
		if !r {
			return nil
		}
	}
	return fmt.Errorf("%w: %w: %s answered Olric's protocol; Peers takes gossip addresses (MemberlistBindPort, BindPort+2 by default)",
		ErrJoin, ErrNotGossipPort, strings.Join(peers, ", "))
}

// speaksRESP reports whether addr answers a RESP PING with a RESP status
// or error line (Olric answers +PONG, or -NOAUTH with a password set).
func speaksRESP(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return false
	}
	var b [64]byte
	n, _ := c.Read(b[:])
	line := string(b[:n])
	return (strings.HasPrefix(line, "+") || strings.HasPrefix(line, "-")) && strings.Contains(line, "\r\n")
}
