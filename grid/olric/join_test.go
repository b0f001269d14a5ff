package olric

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestJoinFailures starts members with Peers that cannot let them in and
// checks that each fails with ErrJoin instead of forming a cluster of its
// own, and that the cluster it was pointed at is unchanged.
func TestJoinFailures(t *testing.T) {
	s := newSecrets(t)
	open := startCluster(t, 1, nil)[0]
	secured := startCluster(t, 2, s.secure(t))
	nowhere := net.JoinHostPort("127.0.0.1", strconv.Itoa(freeBase(t)))
	for _, tc := range []struct {
		name      string
		peers     []string
		tweak     func(*Config)
		olricPort bool
	}{
		{name: "nothing listens", peers: []string{nowhere}},
		{name: "Olric's port of an open member", peers: []string{open.Name()}, olricPort: true},
		{name: "Olric's port of a secured member", peers: []string{secured[0].Name()}, tweak: s.secure(t), olricPort: true},
		{name: "Olric's ports of both secured members", peers: []string{secured[0].Name(), secured[1].Name()}, tweak: s.secure(t), olricPort: true},
		{name: "no gossip key", peers: []string{memberlistAddr(secured[0].cfg)}},
		{name: "wrong gossip key", peers: []string{memberlistAddr(secured[0].cfg)}, tweak: func(c *Config) {
			s.secure(t)(c)
			c.GossipKeys = [][]byte{randomKey(t, 32)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig(t)
			c.JoinTimeout = 2 * time.Second
			if tc.tweak != nil {
				tc.tweak(&c)
			}
			c.Peers = tc.peers
			start := time.Now()
			m, err := Start(context.Background(), c)
			if err == nil {
				shutdownAll(t, []*Member{m})
				t.Fatal("started")
			}
			t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
			if !errors.Is(err, ErrJoin) {
				t.Errorf("%v, want ErrJoin", err)
			}
			if errors.Is(err, ErrNotGossipPort) != tc.olricPort {
				t.Errorf("errors.Is(err, ErrNotGossipPort) = %v, want %v", !tc.olricPort, tc.olricPort)
			}
		})
	}
	for _, m := range secured {
		if members, err := m.node.client.Members(context.Background()); err != nil || len(members) != 2 {
			t.Errorf("%s sees %d members (%v), want 2", m.Name(), len(members), err)
		}
	}
}

// TestJoinSelf gives a member its own gossip address as its only peer: it
// starts a cluster, so every member may be handed the same list.
func TestJoinSelf(t *testing.T) {
	ms := startCluster(t, 1, func(c *Config) { c.Peers = []string{memberlistAddr(*c)} })
	if r := ms[0].routing.current(); r.members != 1 {
		t.Fatalf("%d members", r.members)
	}
}

// TestSecureByDefault checks who may start without security.
func TestSecureByDefault(t *testing.T) {
	s := newSecrets(t)
	lan := DefaultLANConfig()
	lan.BindAddr = "192.0.2.10" // TEST-NET-1: never reached, Start fails first
	certFile, keyFile, caFile := s.ca.files(t)
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
		want  error
	}{
		{"LAN, nothing", func(*Config) {}, ErrInsecure},
		{"LAN, only TLS", func(c *Config) { c.TLS = s.ca.tlsConfig(t) }, ErrInsecure},
		{"LAN, no password", func(c *Config) { s.secure(t)(c); c.Password = "" }, ErrInsecure},
		{"LAN, no gossip key", func(c *Config) { s.secure(t)(c); c.GossipKeys = nil }, ErrInsecure},
		{"LAN, gossip on a LAN address", func(c *Config) { c.BindAddr = "127.0.0.1"; c.MemberlistBindAddr = "192.0.2.10" }, ErrInsecure},
		{"LAN, all three", s.secure(t), nil},
		{"LAN, files", func(c *Config) {
			s.secure(t)(c)
			c.TLS, c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = nil, certFile, keyFile, caFile
		}, nil},
		{"LAN, secret", func(c *Config) { s.secure(t)(c); c.TLS, c.ChannelSecret = nil, randomKey(t, 32) }, nil},
		{"LAN, Insecure", func(c *Config) { c.Insecure = true }, nil},
		{"loopback, nothing", func(c *Config) { c.BindAddr = "127.0.0.1" }, nil},
		{"localhost, nothing", func(c *Config) { c.BindAddr = "localhost" }, nil},
		{"two alternatives", func(c *Config) { s.secure(t)(c); c.ChannelSecret = randomKey(t, 32) }, ErrSecurity},
		{"files incomplete", func(c *Config) { s.secure(t)(c); c.TLS, c.TLSCertFile = nil, certFile }, ErrSecurity},
		{"files unreadable", func(c *Config) {
			s.secure(t)(c)
			c.TLS, c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = nil, certFile, keyFile, caFile+".missing"
		}, ErrSecurity},
		{"short secret", func(c *Config) { s.secure(t)(c); c.TLS, c.ChannelSecret = nil, randomKey(t, 31) }, ErrSecurity},
		{"gossip key of 20 bytes", func(c *Config) { s.secure(t)(c); c.GossipKeys = [][]byte{randomKey(t, 20)} }, ErrSecurity},
		// Secrets that are not random: the 41-character passphrase once
		// accepted and recovered offline from a member's certificate, a key
		// still in hex, bytes repeating two values, a gossip key of text,
		// passwords too short or too repetitive to resist online guessing.
		{"memorable secret", func(c *Config) {
			s.secure(t)(c)
			c.TLS, c.ChannelSecret = nil, []byte("correct horse battery staple rate limiter")
		}, ErrWeakSecret},
		{"hex secret", func(c *Config) {
			s.secure(t)(c)
			c.TLS, c.ChannelSecret = nil, []byte(hex.EncodeToString(randomKey(t, 32)))
		}, ErrWeakSecret},
		{"repetitive secret", func(c *Config) {
			s.secure(t)(c)
			c.TLS, c.ChannelSecret = nil, bytes.Repeat([]byte{0x01, 0xfe}, 16)
		}, ErrWeakSecret},
		{"text gossip key", func(c *Config) { s.secure(t)(c); c.GossipKeys = [][]byte{[]byte("0123456789abcdef0123456789abcdef")} }, ErrWeakSecret},
		{"short password", func(c *Config) { s.secure(t)(c); c.Password = "hunter2hunter2" }, ErrWeakSecret},
		{"repetitive password", func(c *Config) { s.secure(t)(c); c.Password = strings.Repeat("ab", 12) }, ErrWeakSecret},
		{"TLS without a CA", func(c *Config) { s.secure(t)(c); c.TLS.RootCAs = nil }, ErrSecurity},
		{"TLS without a certificate", func(c *Config) { s.secure(t)(c); c.TLS.Certificates = nil }, ErrSecurity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := lan
			tc.tweak(&c)
			c, err := c.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.credentials()
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("%v, want %v", err, tc.want)
			}
			if errors.Is(tc.want, ErrWeakSecret) && (!errors.Is(err, ErrSecurity) || !strings.Contains(fmt.Sprint(err), "openssl rand")) {
				t.Errorf("%v: want ErrSecurity and how to make a secret", err)
			}
		})
	}
	// Start itself refuses before it binds anything.
	if _, err := Start(context.Background(), lan); !errors.Is(err, ErrInsecure) {
		t.Errorf("Start: %v, want ErrInsecure", err)
	}
}

// TestChannelSecurityModes runs a request across two members for each way
// of securing the owner channel.
func TestChannelSecurityModes(t *testing.T) {
	s := newSecrets(t)
	secret := randomKey(t, 32)
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
	}{
		{"PEM files", func(c *Config) {
			s.secure(t)(c)
			c.TLS = nil
			c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = s.ca.files(t)
		}},
		{"shared secret", func(c *Config) {
			s.secure(t)(c)
			c.TLS, c.ChannelSecret = nil, secret
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := startCluster(t, 2, tc.tweak)
			checkRemote(t, ms)
		})
	}
}

// checkRemote consumes from a key owned by ms[1] through ms[0].
func checkRemote(t *testing.T, ms []*Member) {
	t.Helper()
	var key string
	for i := 0; key == ""; i++ {
		if k := "remote-" + strconv.Itoa(i); ms[0].Owner(k) == ms[1].Name() {
			key = k
		}
	}
	cfg := testBucket(10)
	for range 3 {
		if _, err := ms[0].Execute(context.Background(), key, consumeReq(&cfg, 2)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := ms[1].Execute(context.Background(), key, availableReq(&cfg))
	if err != nil || r.Results[0].Tokens != 4 {
		t.Fatalf("%v %v, want 4 tokens", r.Results, err)
	}
}

// TestStartTogether starts three members at once, each given the gossip
// addresses of all three: they form one cluster (each one's gossip port is
// open while it tries the others), not three.
func TestStartTogether(t *testing.T) {
	var cfgs []Config
	var peers []string
	for range 3 {
		c := testConfig(t)
		cfgs = append(cfgs, c)
		peers = append(peers, memberlistAddr(c))
	}
	ms := make([]*Member, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range cfgs {
		cfgs[i].Peers = peers
		wg.Go(func() { ms[i], errs[i] = Start(context.Background(), cfgs[i]) })
	}
	wg.Wait()
	var started []*Member
	for i, m := range ms {
		if errs[i] != nil {
			t.Errorf("member %d: %v", i, errs[i])
		} else {
			started = append(started, m)
		}
	}
	t.Cleanup(func() { shutdownAll(t, started) })
	if len(started) == 3 {
		waitStable(t, started)
	}
}
