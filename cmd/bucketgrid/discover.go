package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// dnsPrefix marks a -grid-peers entry that names a DNS name instead of an
// address: every address the name resolves to, at this instance's gossip
// port, is a peer. A Kubernetes headless service publishes its pods so.
const dnsPrefix = "dns:"

// resolver resolves dns: peers; tests point it at a server of their own.
var resolver = net.DefaultResolver

// splitPeers separates -grid-peers into addresses and DNS names.
func splitPeers(peers []string) (addrs, names []string) {
	for _, p := range peers {
		if name, ok := strings.CutPrefix(p, dnsPrefix); ok {
			names = append(names, name)
		} else {
			addrs = append(addrs, p)
		}
	}
	return addrs, names
}

// dnsDiscovery returns a grid/olric Discover func that resolves names anew
// on every call: the gossip addresses (port gossipPort) of every address
// they hold now. A name that does not exist (a headless service with no
// pod yet) holds no peer; any other failure is an error.
func dnsDiscovery(names []string, gossipPort int) func(context.Context) ([]string, error) {
	port := strconv.Itoa(gossipPort)
	return func(ctx context.Context) ([]string, error) {
		var peers []string
		for _, name := range names {
			addrs, err := resolver.LookupHost(ctx, name)
			if dnsErr := (*net.DNSError)(nil); errors.As(err, &dnsErr) && dnsErr.IsNotFound {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("-grid-peers %s%s: %w", dnsPrefix, name, err)
			}
			for _, a := range addrs {
				peers = append(peers, net.JoinHostPort(a, port))
			}
		}
		return peers, nil
	}
}
