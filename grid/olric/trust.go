package olric

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/trust"
)

// Membership is proven on the owner channel, never taken from gossip: what
// a node must prove, and what it is refused until it has, is "Trust" in
// doc.go. memberlist lets the embedding program veto a node (its Alive and
// Merge delegates; Olric sets only Delegate and Events), and this file
// vetoes every record whose node has not proved itself. A real member's
// record replayed from its own gossip address is the member's own claim
// and changes nothing.
//
// A joiner's record is verified by the member it joins before their state
// sync is merged (NotifyMerge, outside memberlist's locks), and by every
// other member when the joiner's alive message reaches it (NotifyAlive).

// Preambles of the owner channel's other uses (see serveSpecial). The
// identity question's letter changed with its proof ('I' carried a proof
// over the asker's nonce alone, which could be relayed).
var (
	identityPreamble = [5]byte{'B', 'G', 'O', 'P', channelVersion} // who are you?
	tunnelPreamble   = [5]byte{'B', 'G', 'O', 'T', channelVersion} // Olric's own protocol follows
)

func knownPreamble(p [5]byte) bool {
	return p == preamble || p == identityPreamble || p == tunnelPreamble
}

// ErrSecurityMismatch accompanies ErrJoin when a member of the cluster has
// security settings this member lacks, or lacks settings this member has:
// channel TLS or Olric's Password. The member did not join; the error
// names the setting.
var ErrSecurityMismatch = errors.New("bucketgrid/olric: security settings differ from the cluster's")

// errUnproven vetoes a gossip record its node has not proved.
var errUnproven = trust.ErrUnproven

// retryProof: a node whose proof failed is not dialled again sooner.
const retryProof = time.Second

// guard is the member's trust room: its credentials, the throttle of
// failed handshakes on its owner channel, and its record of who proved
// membership, with the accounting of the gossip it refused for want of a
// proof. The mechanisms it drives live in internal/trust.
type guard struct {
	m       *Member
	creds   credentials
	doors   *trust.Throttle // failed handshakes per source
	refused chan struct{}   // closed with refusal set
	refusal error
	mu      sync.Mutex
	self    *trust.Record
	// verified holds the records nodes proved, by node name.
	verified map[string]trust.Record
	certs    map[string]provenCert // the certificates nodes proved, by name (expel.go)
	// callers holds the certificate of each owner-channel connection
	// served, by its accepted net.Conn (expel.go).
	callers  sync.Map
	blocked  atomic.Pointer[map[string]string] // names of revoked nodes, by gossip address
	net      *gossipNet                        // nil unless RevokedFile; set before Olric starts
	failedAt map[string]int64                  // by node name, m.mono nanoseconds
	inFlight map[string]chan bool              // verifications under way, by name
	syncDue  int64                             // see spend, m.mono nanoseconds
	lastErr  error                             // the last failed verification's
	// unverified counts and logs the gossip records refused
	// (unverified.go).
	unverified trust.Refusals
	merged     atomic.Bool // a state sync reached this member (NotifyMerge)
	// keyStrikes counts probeKeys's findings in a row; only Start's
	// goroutine touches it.
	keyStrikes int
	closed     bool
	wg         sync.WaitGroup // background verifications
	once       sync.Once
}

func (t *guard) init(m *Member, creds credentials) {
	t.m = m
	t.creds = creds
	t.doors = trust.NewThrottle()
	t.refused = make(chan struct{})
	t.verified = map[string]trust.Record{}
	t.certs = map[string]provenCert{}
	t.failedAt = map[string]int64{}
	t.inFlight = map[string]chan bool{}
}

// refuse records why this member cannot join; Start fails with it.
func (t *guard) refuse(err error) {
	t.once.Do(func() {
		t.refusal = err
		close(t.refused)
	})
}

// lastFailure returns why the last failed verification failed, or nil.
func (t *guard) lastFailure() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}

// forgetSelf drops this member's own record, for a new Olric member.
func (t *guard) forgetSelf() {
	t.mu.Lock()
	t.self = nil
	t.mu.Unlock()
}

// stop waits for background verifications; no new one starts.
func (t *guard) stop() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}

// proven reports whether n is a node that proved its record.
func (t *guard) proven(n *memberlist.Node) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.verified[n.Name]
	return ok && r.Meta == string(n.Meta) && r.Addr == n.Address()
}

// gossipGate is memberlist's Alive and Merge delegate.
type gossipGate struct{ m *Member }

// NotifyAlive admits this member's own record and the records their nodes
// proved. It is called with memberlist's node lock held (gossip waits
// while it runs), so it verifies an unknown node on the spot only within
// syncProof and while failed verifications on the spot stay within their
// budget (syncBudget): a legitimate node, which answers in milliseconds, is
// admitted by the alive message that announced it, and a stream of forged
// ones (which only a holder of the gossip key can send) delays gossip by at
// most syncProof every syncRefill. Otherwise it refuses the record and
// verifies it in the background; the next alive message or state sync that
// carries it is admitted.
func (g gossipGate) NotifyAlive(n *memberlist.Node) error {
	t := &g.m.trust
	if n.Name == g.m.name {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.self == nil { // memberlist's own, at its start
			t.self = &trust.Record{Meta: string(n.Meta), Addr: n.Address()}
		} else if t.self.Meta != string(n.Meta) || t.self.Addr != n.Address() {
			// Another record under this member's name: most often its
			// previous process's, which the others still take for alive
			// (its leave lost), or a forgery. memberlist never adopts a
			// record about the local node from the network: it refutes it,
			// announcing this member's own record with a higher
			// incarnation. Refusing it here would stop that refutation,
			// and the others, which ignore this member's records of lower
			// incarnations, would keep the old process's record while this
			// one answers its probes, so the restarted member would not be
			// let in for as long as that lasts. It came from another
			// member's gossip: see node.others.
			g.m.node.others.Store(true)
			return nil
		}
		g.m.members.note(n)
		return nil
	}
	g.m.node.others.Store(true) // before any verification: see node.others
	if t.proven(n) {
		g.admit(n)
		return nil
	}
	if t.spend() {
		ctx, cancel := context.WithTimeout(g.m.ctx, syncProof)
		err := t.verify(ctx, n)
		cancel()
		if err == nil {
			g.admit(n)
			return nil
		}
		t.charge()
		t.count(n.Name, n.Address(), err)
		return err
	}
	t.background(n)
	t.count(n.Name, n.Address(), errUnproven)
	return errUnproven
}

// admit notes a proven node: the join succeeded, and the membership
// record (heal.go) knows it.
func (g gossipGate) admit(n *memberlist.Node) {
	g.m.node.joined.Store(true)
	g.m.members.note(n)
}

// Verification on the spot, under memberlist's lock: each attempt may
// take syncProof; failed ones may owe syncBurst attempts, one drained every
// syncRefill.
const (
	syncProof  = 250 * time.Millisecond
	syncBurst  = 4
	syncRefill = 5 * time.Second
)

// spend reports whether an unknown node may be verified on the spot now.
func (t *guard) spend() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	return t.syncDue-t.m.mono() <= int64(syncBurst-1)*int64(syncRefill)
}

// charge records a failed verification on the spot.
func (t *guard) charge() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.syncDue = max(t.syncDue, t.m.mono()) + int64(syncRefill)
}

// NotifyMerge verifies the unknown alive nodes of a joining state sync,
// in parallel, before memberlist merges it (each is then admitted or
// refused by NotifyAlive). It runs outside memberlist's locks. It fails
// the sync when it lists a revoked node alive (see expel.go), and when
// this member, still starting, finds that its security settings differ
// from the cluster's.
func (g gossipGate) NotifyMerge(nodes []*memberlist.Node) error {
	t := &g.m.trust
	for _, n := range nodes {
		if n.State == memberlist.StateAlive && n.Name != g.m.name && t.gossipBlocked(n.Address()) {
			// The revoked node's own sync, or one from a member that
			// still counts it alive: its records of the others are not
			// taken in.
			t.refuseRevoked(n.Name, n.Address())
			return fmt.Errorf("bucketgrid/olric: state sync listing %s alive refused: %w", n.Name, errRevoked)
		}
	}
	t.merged.Store(true)
	for _, n := range nodes {
		if n.Name != g.m.name {
			g.m.node.others.Store(true)
		}
	}
	ctx, cancel := context.WithTimeout(g.m.ctx, g.m.cfg.ChannelIOTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, n := range nodes {
		if n.State != memberlist.StateAlive || n.Name == g.m.name || t.proven(n) {
			continue
		}
		wg.Go(func() { t.verify(ctx, n) })
	}
	wg.Wait()
	select {
	case <-t.refused:
		return t.refusal
	default:
	}
	return nil
}

// background verifies n unless a verification of it is under way or
// failed less than retryProof ago.
func (t *guard) background(n *memberlist.Node) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.inFlight[n.Name] != nil {
		return
	}
	if at, ok := t.failedAt[n.Name]; ok && t.m.mono()-at < int64(retryProof) {
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		ctx, cancel := context.WithTimeout(t.m.ctx, t.m.cfg.ChannelIOTimeout)
		defer cancel()
		t.verify(ctx, n)
	}()
}

// verify asks n's owner channel who it is and records n as proven if the
// answer matches its gossip record. Concurrent verifications of one name
// share the first one's dial.
func (t *guard) verify(ctx context.Context, n *memberlist.Node) error {
	want := trust.Record{Meta: string(n.Meta), Addr: n.Address()}
	t.mu.Lock()
	if r, ok := t.verified[n.Name]; ok && r == want {
		t.mu.Unlock()
		return nil
	}
	if ch := t.inFlight[n.Name]; ch != nil {
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		if t.proven(n) {
			return nil
		}
		return errUnproven
	}
	ch := make(chan bool)
	t.inFlight[n.Name] = ch
	t.mu.Unlock()
	leaf, err := t.prove(ctx, n.Name, want)
	t.mu.Lock()
	delete(t.inFlight, n.Name)
	if err == nil {
		t.verified[n.Name] = want
		if leaf != nil && (len(t.certs) < maxSeen || t.certs[n.Name].leaf != nil) {
			t.certs[n.Name] = provenCert{leaf: leaf, addr: want.Addr}
		}
		delete(t.failedAt, n.Name)
	} else {
		t.failedAt[n.Name] = t.m.mono()
		t.lastErr = err
	}
	if len(t.failedAt) > 4*trust.Sources {
		clear(t.failedAt)
	}
	t.mu.Unlock()
	close(ch)
	if err == nil {
		t.provenNow(n.Name)
	} else {
		t.failedProof(n.Name, want.Addr, err)
	}
	return err
}

// prove dials the member called name and compares what it says with want;
// it returns the certificate the member proved (nil without TLS).
// While this member starts, a difference in security settings refuses the
// join (see ErrSecurityMismatch).
func (t *guard) prove(ctx context.Context, name string, want trust.Record) (*x509.Certificate, error) {
	m := t.m
	var nonce [trust.NonceLen]byte
	rand.Read(nonce[:])
	a, err := t.askIdentity(ctx, name, nonce)
	if err != nil {
		if !m.node.started.Load() {
			if why := t.securityProbe(ctx, name); why != "" {
				t.refuse(fmt.Errorf("%w: %s: %s", ErrSecurityMismatch, name, why))
			}
		}
		return nil, fmt.Errorf("%w: %s: %w", errUnproven, name, err)
	}
	hasPw := a.flags&trust.ProofFlagPw != 0
	var why string
	switch {
	case hasPw && t.creds.password == "":
		why = "the cluster's members have a Password; this member has none (missing: Password)"
	case !hasPw && t.creds.password != "":
		why = "this member has a Password; the cluster's members have none"
	case hasPw && !hmac.Equal(a.mac, trust.MAC(t.creds.password, a.binding, m.name, name, nonce, a.r, a.flags)):
		why = "Password differs from the cluster's"
	}
	if why != "" {
		if !m.node.started.Load() {
			t.refuse(fmt.Errorf("%w: %s: %s", ErrSecurityMismatch, name, why))
		}
		return nil, fmt.Errorf("%w: %s: %s", errUnproven, name, why)
	}
	if a.r != want {
		return nil, fmt.Errorf("%w: %s answered another record than gossip's", errUnproven, name)
	}
	if got := metaName(want.Meta); got != name {
		return nil, fmt.Errorf("%w: %s gossips the metadata of %q", errUnproven, name, got)
	}
	return a.leaf, nil
}

// metaName returns the member name in Olric's node metadata (its
// discovery.Member, msgpack), or "" if it has none.
func metaName(meta string) string {
	var mb struct{ Name string }
	if msgpack.Unmarshal([]byte(meta), &mb) != nil {
		return ""
	}
	return mb.Name
}

// probeKeys runs when gossip has not let this member in a second after it
// started: for each peer whose owner channel is where the default ports put
// it (the gossip port - 1), a member that answers there with that gossip
// address is running, so gossip refused this member for its keys. It
// refuses the join naming GossipKeys when two probes in a row, a second
// apart, find so. A member whose gossip has not started yet, or that a
// state sync reached (it has the cluster's keys and waits for proofs),
// probes nothing; one that has no GossipKeys, answered by a member that
// has none either, refuses nothing (without keys, gossip refuses nobody
// for them: it is only slow).
func (t *guard) probeKeys(ctx context.Context, peers []string) {
	t.mu.Lock()
	started := t.self != nil
	t.mu.Unlock()
	if t.merged.Load() || !started {
		t.keyStrikes = 0
		return
	}
	for _, p := range peers {
		host, port, err := net.SplitHostPort(p)
		if err != nil {
			continue
		}
		gp, err := strconv.Atoi(port)
		if err != nil || gp < 3 {
			continue
		}
		name := net.JoinHostPort(host, strconv.Itoa(gp-2))
		var nonce [trust.NonceLen]byte
		a, err := t.askIdentity(ctx, name, nonce)
		if err != nil {
			if why := t.securityProbe(ctx, name); why != "" {
				t.refuse(fmt.Errorf("%w: %s: %s", ErrSecurityMismatch, name, why))
				return
			}
			continue
		}
		if a.r.Addr != p {
			continue
		}
		has := a.flags&trust.ProofFlagGossip != 0
		if !has && t.creds.keyring == nil {
			// Neither side encrypts gossip: there are no keys to differ,
			// and gossip is only slow to let this member in (a starved
			// machine: TestCrash beside 8 busy loops on one core was
			// refused so two seconds after its gossip started).
			t.keyStrikes = 0
			return
		}
		if t.keyStrikes++; t.keyStrikes < 2 {
			return
		}
		why := "GossipKeys differ from the cluster's"
		switch {
		case has && t.creds.keyring == nil:
			why = "the cluster's members have GossipKeys; this member has none (missing: GossipKeys)"
		case !has && t.creds.keyring != nil:
			why = "this member has GossipKeys; the cluster's members have none"
		}
		t.refuse(fmt.Errorf("%w: %s: %s", ErrSecurityMismatch, name, why))
		return
	}
}

// answer is a member's answer to the identity question.
type answer struct {
	r       trust.Record
	flags   byte
	mac     []byte
	binding []byte            // the connection's, see trust.Binding
	leaf    *x509.Certificate // the answerer's, with TLS
}

// askIdentity asks the member called name for its record over its owner
// channel (mutual TLS when configured; its certificate must name it),
// saying who asks.
func (t *guard) askIdentity(ctx context.Context, name string, nonce [trust.NonceLen]byte) (a answer, err error) {
	m := t.m
	c, err := m.peers.dialSpecial(ctx, name, identityPreamble)
	if err != nil {
		return a, err
	}
	defer c.Close()
	if a.binding, err = trust.Binding(c); err != nil {
		return a, err
	}
	if tc, ok := c.(*tls.Conn); ok {
		a.leaf = tc.ConnectionState().PeerCertificates[0]
	}
	if _, err := c.Write(trust.AppendField(nonce[:], []byte(m.name))); err != nil {
		return a, err
	}
	br := bufio.NewReader(c)
	meta, err := trust.ReadField(br, trust.MaxMeta)
	if err != nil {
		return a, err
	}
	addr, err := trust.ReadField(br, trust.MaxAddr)
	if err != nil {
		return a, err
	}
	var tail [1 + sha256.Size]byte
	if _, err := io.ReadFull(br, tail[:]); err != nil {
		return a, err
	}
	if len(meta) == 0 {
		return a, errors.New("not started yet")
	}
	a.r, a.flags, a.mac = trust.Record{Meta: string(meta), Addr: string(addr)}, tail[0], tail[1:]
	return a, nil
}

// securityProbe tells, after an identity question to the member called
// name failed, whether that member's channel security differs from this
// member's: it answers TLS where this member speaks none, or the plain
// channel where this member speaks TLS. "" means no difference was seen.
func (t *guard) securityProbe(ctx context.Context, name string) string {
	m := t.m
	addr, err := channelAddr(name)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ChannelIOTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return ""
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	if t.creds.client == nil {
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if tc.HandshakeContext(ctx) == nil {
			return "its owner channel requires mutual TLS; this member has none (missing: TLS, TLSCertFile or ChannelSecret)"
		}
		return ""
	}
	var nonce [trust.NonceLen]byte
	c.Write(trust.AppendField(append(identityPreamble[:], nonce[:]...), []byte(m.name)))
	if meta, err := trust.ReadField(bufio.NewReader(c), trust.MaxMeta); err == nil && len(meta) > 0 {
		return "its owner channel has no TLS; this member has TLS (the cluster is missing it)"
	}
	return ""
}

// serveIdentity answers who this member is: its Olric metadata and gossip
// address (empty before memberlist started), whether it has a Password and
// a proof with it (trust.MAC) for this connection, the asker it names and
// this member. With TLS, the asker's certificate must name the asker's
// host: the answer is for the member proven on this connection only.
func (t *guard) serveIdentity(c net.Conn) {
	m := t.m
	c.SetDeadline(time.Now().Add(m.cfg.ChannelIOTimeout))
	br := bufio.NewReader(c)
	var nonce [trust.NonceLen]byte
	if _, err := io.ReadFull(br, nonce[:]); err != nil {
		return
	}
	asker, err := trust.ReadField(br, trust.MaxAddr)
	if err != nil {
		return
	}
	binding, err := trust.Binding(c)
	if err != nil {
		return
	}
	if tc, ok := c.(*tls.Conn); ok {
		host, _, err := net.SplitHostPort(string(asker))
		certs := tc.ConnectionState().PeerCertificates
		if err != nil || len(certs) == 0 || certs[0].VerifyHostname(host) != nil {
			return
		}
	}
	var self trust.Record
	t.mu.Lock()
	if t.self != nil {
		self = *t.self
	}
	t.mu.Unlock()
	out := trust.AppendField(nil, []byte(self.Meta))
	out = trust.AppendField(out, []byte(self.Addr))
	var flags byte
	if t.creds.keyring != nil {
		flags |= trust.ProofFlagGossip
	}
	if t.creds.password != "" {
		flags |= trust.ProofFlagPw
		out = append(out, flags)
		out = append(out, trust.MAC(t.creds.password, binding, string(asker), m.name, nonce, self, flags)...)
	} else {
		out = append(out, flags)
		out = append(out, make([]byte, sha256.Size)...)
	}
	c.Write(out)
}
