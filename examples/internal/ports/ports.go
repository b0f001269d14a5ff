// Package ports finds free loopback ports for the examples' tests: a grid
// member needs three consecutive ports (Olric, the owner channel, gossip
// over TCP and UDP), which Olric cannot pick by itself.
package ports

import (
	"net"
	"strconv"
	"testing"
)

// Triples returns n base ports, each free a moment ago together with the
// two ports after it (TCP, and UDP for gossip), none overlapping another.
func Triples(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	taken := func(p int) bool {
		for _, q := range ports {
			if p <= q+2 && q <= p+2 {
				return true
			}
		}
		return false
	}
	for try := 0; len(ports) < n; try++ {
		if try > 1000 {
			t.Fatal("no free port triples")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p+2 > 65535 || taken(p) || !Free(p+1) || !Free(p+2) {
			continue
		}
		ports = append(ports, p)
	}
	return ports
}

// Free reports whether port p of 127.0.0.1 is free for TCP and UDP.
func Free(p int) bool {
	addr := "127.0.0.1:" + strconv.Itoa(p)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
