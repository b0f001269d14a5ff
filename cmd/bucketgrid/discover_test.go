package main

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// dnsServer is a DNS server on loopback whose answers the test sets: A
// records per name, or a failure.
type dnsServer struct {
	mu      sync.Mutex
	records map[string][]string // fully qualified name → IPv4 addresses
	fail    bool                // answer SERVFAIL
	asked   int
}

func (s *dnsServer) set(name string, addrs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[dns.Fqdn(name)] = addrs
}

func (s *dnsServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	m := new(dns.Msg)
	m.SetReply(r)
	q := r.Question[0]
	addrs, ok := s.records[q.Name]
	switch {
	case s.fail:
		m.Rcode = dns.RcodeServerFailure
	case !ok:
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA:
		for _, a := range addrs {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: net.ParseIP(a)})
		}
	}
	w.WriteMsg(m)
}

// useDNSServer starts a dnsServer and points the dns: resolver at it until
// the test ends.
func useDNSServer(t *testing.T) *dnsServer {
	t.Helper()
	s := &dnsServer{records: map[string][]string{}}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: s}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	addr := pc.LocalAddr().String()
	prev := resolver
	resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
	t.Cleanup(func() {
		resolver = prev
		srv.Shutdown()
	})
	return s
}

// TestDNSDiscovery: dns: peers are every address the name holds at the
// gossip port, resolved anew on each call; a name that does not exist
// holds none; a failing server is an error.
func TestDNSDiscovery(t *testing.T) {
	s := useDNSServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	discover := dnsDiscovery([]string{"grid.bucketgrid.test.", "missing.bucketgrid.test."}, 3322)

	s.set("grid.bucketgrid.test", "10.0.0.1")
	got, err := discover(ctx)
	if err != nil || !slices.Equal(got, []string{"10.0.0.1:3322"}) {
		t.Fatalf("one pod: %v %v", got, err)
	}
	s.set("grid.bucketgrid.test", "10.0.0.1", "10.0.0.2")
	got, err = discover(ctx)
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []string{"10.0.0.1:3322", "10.0.0.2:3322"}) {
		t.Fatalf("two pods, resolved anew: %v %v", got, err)
	}
	s.mu.Lock()
	s.fail = true
	s.mu.Unlock()
	if got, err = discover(ctx); err == nil || !strings.Contains(err.Error(), "dns:grid.bucketgrid.test.") {
		t.Fatalf("failing server: %v %v, want an error naming the flag", got, err)
	}
}

// TestDNSPeersFormOneGrid: two instances on two loopback addresses and one
// port, both given -grid-peers dns:NAME. The first finds only itself and
// starts the grid; once the name holds both, the second joins it.
func TestDNSPeersFormOneGrid(t *testing.T) {
	s := useDNSServer(t)
	port := commonGridPort(t, "127.0.0.2", "127.0.0.3")
	dir := writeConfig(t, t.TempDir(), map[string]string{"srv.yaml": serverConfig})
	args := func(ip string) []string {
		return []string{"-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "",
			"-grid-bind", net.JoinHostPort(ip, strconv.Itoa(port)), "-grid-peers", "dns:grid.bucketgrid.test", "-grid-join-timeout", "60s"}
	}
	s.set("grid.bucketgrid.test", "127.0.0.2")
	first := startInstance(t, args("127.0.0.2")...)
	if field(first.ready, "members=") != "1" {
		t.Fatalf("first instance: %s, want members=1", first.ready)
	}
	s.set("grid.bucketgrid.test", "127.0.0.2", "127.0.0.3")
	second := startInstance(t, args("127.0.0.3")...)
	if field(second.ready, "members=") != "2" {
		t.Fatalf("second instance: %s, want members=2 (it joined what the name held)", second.ready)
	}
	if _, err := call(client(t, first.grpcAddr), req("srv", "k", "shared")); err != nil {
		t.Fatal(err)
	}
	r, err := call(client(t, second.grpcAddr), req("srv", "k", "shared"))
	if err != nil || r.OverallCode.String() != "OVER_LIMIT" {
		t.Fatalf("the second instance's answer for a key the first spent: %v %v, want OVER_LIMIT (one grid)", r, err)
	}
}
