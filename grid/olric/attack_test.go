package olric

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// ---- what an attacker on the network does ----

// gossipJoin tries to join the cluster at seed as a memberlist node with
// the given gossip keys (none: clear text) and returns Join's error.
func gossipJoin(t *testing.T, seed string, keys [][]byte) error {
	t.Helper()
	c := memberlist.DefaultLocalConfig()
	c.Name = "attacker"
	c.BindAddr = "127.0.0.1"
	c.BindPort = 0
	c.LogOutput = io.Discard
	if len(keys) > 0 {
		kr, err := memberlist.NewKeyring(keys[1:], keys[0])
		if err != nil {
			t.Fatal(err)
		}
		c.Keyring = kr
	}
	ml, err := memberlist.Create(c)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	_, err = ml.Join([]string{seed})
	return err
}

// resp sends one RESP command on c and returns the first line of the
// answer (plus the bulk string that follows a "$n" line).
func resp(t *testing.T, c net.Conn, r *bufio.Reader, args ...string) string {
	t.Helper()
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(b.Bytes()); err != nil {
		return "write: " + err.Error()
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "read: " + err.Error()
	}
	if n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$"))); strings.HasPrefix(line, "$") && err == nil && n >= 0 {
		body := make([]byte, n+2)
		io.ReadFull(r, body)
		return line + string(body[:n])
	}
	return line
}

// olricPort opens a RESP connection to a member's Olric port, sending
// AUTH password first unless password is empty, and returns the answer to
// AUTH with the connection.
func olricPort(t *testing.T, m *Member, password string) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	c, err := net.Dial("tcp", m.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	auth := ""
	if password != "" {
		auth = resp(t, c, r, "auth", password)
	}
	return c, r, auth
}

// channelAttempt connects to a member's owner channel over conn (plain or
// TLS), sends a frame that would fill key's bucket with 2×10^12 tokens and
// one that would remove it, and reports what came back: "" when the
// member closed the connection without a word of the channel protocol.
func channelAttempt(t *testing.T, c net.Conn, key string) string {
	t.Helper()
	defer c.Close()
	hijack, _ := core.NewConfig(core.Intervally(10, 10, time.Hour))
	req := wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &hijack, Ops: []wire.Op{{Kind: wire.OpForceAddTokens, Tokens: 2e12}}}
	f := append(frame.Preamble[:], requestFrame(1, frame.KindExecute, 5*time.Second, key, wire.AppendRequest(nil, &req))...)
	f = append(f, requestFrame(2, frame.KindRemove, 5*time.Second, key, nil)...)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(f) // may fail: the member may already have hung up
	r := bufio.NewReader(c)
	var pre [len(frame.Preamble)]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil || pre != frame.Preamble {
		if err != nil && !isClosed(err) {
			t.Errorf("read: %v; want the member to hang up", err)
		}
		return ""
	}
	fr := frame.NewReader(r, nil, 0, 0)
	var kinds []byte
	for range 2 {
		body, err := fr.Next()
		if err != nil {
			break
		}
		_, kind, _, _ := frame.Parse(body)
		kinds = append(kinds, kind)
	}
	return fmt.Sprintf("channel answers of kinds %v", kinds)
}

// isClosed reports errors that mean "the other side hung up" (including a
// TLS alert sent before hanging up).
func isClosed(err error) bool {
	var alert tls.AlertError
	return errors.Is(err, io.EOF) || errors.As(err, &alert) || strings.Contains(err.Error(), "reset by peer") ||
		strings.Contains(err.Error(), "remote error")
}

// tlsDial connects to addr with cfg and returns the connection, even when
// the handshake failed on the client side (then nil).
func tlsDial(t *testing.T, addr string, cfg *tls.Config) net.Conn {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(raw, cfg)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Handshake(); err != nil {
		raw.Close()
		return nil
	}
	return c
}

// ---- the attacks ----

// TestAttacks runs every attack of the threat model against a secured 3-member
// cluster, first holding no credentials, then holding wrong ones (another
// CA's certificate, another gossip key, another password), and checks
// that each fails and that every bucket is afterwards exactly what the
// members' own traffic made it. The same attacks succeed against an
// unsecured member (the controls), so the tests can tell.
func TestAttacks(t *testing.T) {
	s := newSecrets(t)
	ms := startCluster(t, 3, s.secure(t))
	t.Cleanup(func() { shutdownAll(t, ms[3:]) }) // the member that joins
	wrong := newSecrets(t)

	// The members' own traffic: 30 buckets of capacity 100, each drawn
	// down by 1..7 from the three members in turn.
	cfg, _ := core.NewConfig(core.Intervally(100, 100, time.Hour))
	ctx := context.Background()
	victims := keySet("victim-", 30)
	for i, k := range victims {
		if _, err := ms[i%3].Execute(ctx, k, consumeReq(&cfg, int64(i%7+1))); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() map[string]string {
		out := map[string]string{}
		for _, k := range victims {
			gr, err := ms[0].node.dm.Get(ctx, k)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			b, _ := gr.Byte()
			out[k] = string(b)
		}
		return out
	}
	before := stored()
	owners := map[string]bool{}
	for _, k := range victims {
		owners[ms[0].Owner(k)] = true
	}
	if len(owners) != 3 {
		t.Fatalf("victims owned by %d members, want all 3", len(owners))
	}
	seed := memberlistAddr(ms[0].cfg)
	victim := victims[0]
	owner := ms[0]
	for _, m := range ms {
		if m.Name() == m.Owner(victim) {
			owner = m
		}
	}

	t.Run("gossip", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			keys [][]byte
		}{{"no key", nil}, {"wrong key", [][]byte{wrong.gossip}}} {
			if err := gossipJoin(t, seed, tc.keys); err == nil {
				t.Errorf("%s: joined the cluster's gossip", tc.name)
			}
		}
		for _, m := range ms {
			members, err := m.node.client.Members(ctx)
			if err != nil || len(members) != 3 {
				t.Errorf("%s sees %d members (%v), want 3", m.Name(), len(members), err)
			}
		}
	})

	t.Run("olric port", func(t *testing.T) {
		for _, password := range []string{"", wrong.password} {
			c, r, auth := olricPort(t, owner, password)
			if password != "" && !strings.HasPrefix(auth, "-WRONGPASS") {
				t.Errorf("AUTH with a wrong password: %q", auth)
			}
			for _, cmd := range [][]string{
				{"dm.put", owner.cfg.DMap, victim, "\x01hijacked"},
				{"dm.get", owner.cfg.DMap, victim},
				{"dm.del", owner.cfg.DMap, victim},
				{"dm.put", owner.cfg.DMap + ".members", owner.Name(), "127.0.0.1:1"},
			} {
				if got := resp(t, c, r, cmd...); !strings.HasPrefix(got, "-NOAUTH") {
					t.Errorf("password %q: %s answered %q, want NOAUTH", password, cmd[0], got)
				}
			}
		}
	})

	t.Run("owner channel", func(t *testing.T) {
		addr := owner.ChannelAddr()
		raw, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := channelAttempt(t, raw, victim); got != "" {
			t.Errorf("plain TCP: %s", got)
		}
		for _, tc := range []struct {
			name string
			cfg  *tls.Config
		}{
			{"TLS without a certificate", &tls.Config{InsecureSkipVerify: true}},
			{"TLS with another CA's certificate", &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{wrong.ca.leaf(t)}}},
			{"TLS 1.2 with another CA's certificate", &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12, Certificates: []tls.Certificate{wrong.ca.leaf(t)}}},
			// Not an attack but the floor: even a member's certificate
			// gets nowhere below TLS 1.3.
			{"TLS 1.2 with a member's certificate", &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12, Certificates: []tls.Certificate{s.ca.leaf(t)}}},
		} {
			c := tlsDial(t, addr, tc.cfg)
			if c == nil {
				continue // refused during the handshake
			}
			if got := channelAttempt(t, c, victim); got != "" {
				t.Errorf("%s: %s", tc.name, got)
			}
		}
		// The control: with a member's certificate the same frames are
		// answered (on a key of no victim), so the cases above were refused
		// for their credentials, not for their frames.
		_, member, err := mutualTLS(s.ca.tlsConfig(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if c := tlsDial(t, addr, dialTLS(member, "127.0.0.1")); c == nil || channelAttempt(t, c, "control") == "" {
			t.Error("a member's certificate got no answer")
		}
		// A member with the wrong credentials is refused the same way: a
		// caller's TLS configuration built from another CA.
		_, client, err := mutualTLS(wrong.ca.tlsConfig(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if c := tlsDial(t, addr, dialTLS(client, "127.0.0.1")); c != nil {
			t.Error("the member's certificate verified against another CA")
			c.Close()
		}
	})

	t.Run("certificate naming another host", func(t *testing.T) {
		// A certificate of the cluster CA issued for another host
		// (10.9.9.9), presented from this one. The owner channel answered
		// its frames, and its tunnel carried the password to Olric's port,
		// where the stored buckets were read and deleted.
		other := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{s.ca.leafFor(t, net.IPv4(10, 9, 9, 9))}}
		if c := tlsDial(t, owner.ChannelAddr(), other); c != nil {
			if got := channelAttempt(t, c, victim); got != "" {
				t.Errorf("owner channel: %s", got)
			}
		}
		if c := tlsDial(t, owner.ChannelAddr(), other); c != nil {
			defer c.Close()
			c.Write(tunnelPreamble[:])
			r := bufio.NewReader(c)
			for _, cmd := range [][]string{{"auth", s.password}, {"dm.get", owner.cfg.DMap, victim}, {"dm.del", owner.cfg.DMap, victim}} {
				if got := resp(t, c, r, cmd...); !strings.HasPrefix(got, "read: ") && !strings.HasPrefix(got, "write: ") {
					t.Errorf("tunnel: %s answered %q, want the connection closed", cmd[0], got)
				}
			}
		}
		// The control: the same frames and commands with a certificate
		// naming this host are answered.
		named := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{s.ca.leaf(t)}}
		if c := tlsDial(t, owner.ChannelAddr(), named); c == nil || channelAttempt(t, c, "control") == "" {
			t.Error("owner channel: a certificate naming this host got no answer")
		}
		if c := tlsDial(t, owner.ChannelAddr(), named); c == nil {
			t.Error("tunnel: a certificate naming this host was refused")
		} else {
			defer c.Close()
			c.Write(tunnelPreamble[:])
			if got := resp(t, c, bufio.NewReader(c), "auth", s.password); !strings.HasPrefix(got, "+OK") {
				t.Errorf("tunnel: AUTH with a certificate naming this host answered %q", got)
			}
		}
	})

	t.Run("redirect", func(t *testing.T) {
		// Nothing an outsider writes decides where requests go: the
		// channel address is the owner's name (from the authenticated
		// routing table) plus one. Even a registry entry written with the
		// credentials (as the old registry DMap held) changes nothing for a
		// member that joins afterwards.
		fake, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer fake.Close()
		dials := make(chan struct{}, 100)
		go func() {
			for {
				c, err := fake.Accept()
				if err != nil {
					return
				}
				dials <- struct{}{}
				c.Close()
			}
		}()
		reg, err := ms[0].node.client.NewDMap(ms[0].cfg.DMap + ".members")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if err := reg.Put(ctx, m.Name(), fake.Addr().String()); err != nil {
				t.Fatal(err)
			}
		}
		c := testConfig(t)
		s.secure(t)(&c)
		c.Peers = []string{seed}
		joined, err := Start(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		// Part of the cluster until the end: it owns victims now.
		ms = append(ms, joined)
		waitStable(t, ms)
		probe := keySet("redirect-", 30)
		for _, k := range probe {
			for range 3 {
				if _, err := joined.Execute(ctx, k, consumeReq(&cfg, 1)); err != nil {
					t.Fatal(err)
				}
			}
			r, err := ms[0].Execute(ctx, k, availableReq(&cfg))
			if err != nil || r.Results[0].Tokens != 97 {
				t.Errorf("%s: %v tokens (%v), want 97", k, r.Results, err)
			}
		}
		if len(dials) > 0 {
			t.Errorf("the fake owner got %d connections", len(dials))
		}
		// The new member owns some victims now; it reads them from Olric.
		victimsOnJoined := 0
		for _, k := range victims {
			if joined.Owner(k) == joined.Name() {
				victimsOnJoined++
			}
		}
		t.Logf("after the join, %d of %d victim buckets moved to the new member", victimsOnJoined, len(victims))
	})

	// Every bucket is what the members made it: the stored bytes are
	// untouched, and each answers its members' draw-down.
	after := stored()
	for i, k := range victims {
		if before[k] != after[k] {
			t.Errorf("%s: stored state changed during the attacks", k)
		}
		r, err := ms[(i+1)%3].Execute(ctx, k, availableReq(&cfg))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.Results[0].Tokens, int64(100-(i%7+1)); got != want {
			t.Errorf("%s: %d tokens, want %d", k, got, want)
		}
	}
}

// TestAttackControls runs the same attacks against targets without
// security, where they must succeed: the attack code is able to do what
// TestAttacks shows it cannot.
func TestAttackControls(t *testing.T) {
	ms := startCluster(t, 1, nil)
	m := ms[0]
	ctx := context.Background()
	cfg, _ := core.NewConfig(core.Intervally(100, 100, time.Hour))
	if _, err := m.Execute(ctx, "victim", consumeReq(&cfg, 5)); err != nil {
		t.Fatal(err)
	}

	t.Run("gossip", func(t *testing.T) {
		// A bare memberlist without a key (Olric would choke on a node
		// without its metadata, so not the member itself).
		c := memberlist.DefaultLocalConfig()
		c.Name, c.BindAddr, c.BindPort, c.LogOutput = "victim", "127.0.0.1", 0, io.Discard
		ml, err := memberlist.Create(c)
		if err != nil {
			t.Fatal(err)
		}
		defer ml.Shutdown()
		if err := gossipJoin(t, ml.LocalNode().Address(), nil); err != nil {
			t.Errorf("could not join an open memberlist: %v", err)
		}
	})
	t.Run("olric port", func(t *testing.T) {
		c, r, _ := olricPort(t, m, "")
		if got := resp(t, c, r, "dm.put", m.cfg.DMap, "planted", "\x01hijacked"); !strings.HasPrefix(got, "+OK") {
			t.Errorf("dm.put on an open member: %q", got)
		}
		if got := resp(t, c, r, "dm.get", m.cfg.DMap, "planted"); !strings.Contains(got, "hijacked") {
			t.Errorf("dm.get on an open member: %q", got)
		}
	})
	t.Run("owner channel", func(t *testing.T) {
		raw, err := net.Dial("tcp", m.ChannelAddr())
		if err != nil {
			t.Fatal(err)
		}
		if got := channelAttempt(t, raw, "victim"); got == "" {
			t.Error("no answer from an open owner channel")
		}
		r, err := m.Execute(ctx, "victim", availableReq(&cfg))
		if err != nil || r.Results[0].Tokens != 100 {
			t.Errorf("victim after the open channel's remove: %v %v, want a full bucket", r.Results, err)
		}
	})
}
