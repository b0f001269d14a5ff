package olric

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
)

// Config configures one member: the embedded Olric member, its gossip, and
// the owner channel that carries bucket requests between members.
//
// A member uses three ports on BindAddr: BindPort for Olric's own protocol,
// BindPort+1 for the owner channel and, by default, BindPort+2 for gossip
// (memberlist, TCP and UDP). Peers name gossip ports.
//
// Start it from DefaultLocalConfig or DefaultLANConfig and change what
// differs; Start rejects a configuration that would silently misbehave
// (timing parameters that break the hand-over guard, a missing address, a
// member reachable from the network without security).
type Config struct {
	// Env is the Olric and memberlist environment profile, "local" or
	// "lan"; it sets gossip and failure-detection timings.
	Env string

	// BindAddr and BindPort are the address Olric serves its own protocol
	// on. BindAddr:BindPort is the member's name in the cluster, and the
	// other members reach its owner channel at BindAddr:BindPort+1: both
	// must be reachable from every other member. Olric does not support
	// port 0 here.
	BindAddr string
	BindPort int

	// MemberlistBindAddr and MemberlistBindPort are the gossip address;
	// empty and 0 mean BindAddr and BindPort+2.
	MemberlistBindAddr string
	MemberlistBindPort int

	// Peers are the gossip addresses (host:MemberlistBindPort, by default
	// BindPort+2 — not Olric's BindPort) of members to join; empty starts a
	// new cluster. When Peers is not empty Start never forms a new cluster:
	// it fails with ErrJoin if no peer let it in within JoinTimeout, at
	// once if a peer answers Olric's protocol instead of gossip. An entry
	// equal to this member's own gossip address is ignored, so every member
	// may be given the same list.
	Peers []string

	// Discover, when not nil, finds more peers: it returns gossip
	// addresses as Peers holds them, from DNS or an orchestrator's API.
	// Start joins Peers and what Discover returned, under the same rules
	// (this member's own address ignored; with no other member in either,
	// Start forms a new cluster), and a member that joins again, as when a
	// split heals, asks it anew. An error from it fails Start.
	Discover func(ctx context.Context) ([]string, error)

	// ReplicaCount is Olric's replica count: 1 keeps one copy of each
	// bucket (a member that leaves or crashes takes its buckets with it:
	// they start again as LostState says), 2 keeps a synchronous backup on another member
	// (nothing lost when one member leaves, 3-5x slower writes).
	ReplicaCount int

	// PartitionCount is Olric's partition count; every member must use the
	// same value. Default 271.
	PartitionCount uint64

	// DMap is the name of the Olric DMap holding the buckets. Default
	// "bucketgrid". The DMap named DMap+".lost" holds the lost partitions'
	// marks (see "Lost state" in the package documentation): the
	// application must not use either name for its own data.
	DMap string

	// Clock is the time of every bucket this member owns. It must read Unix
	// time (Clock.Wall() true), or Start returns ErrClock. Default
	// clock.Wall().
	Clock clock.Clock

	// LogOutput receives Olric's, memberlist's and go-redis's logs, and the
	// member's own: one line for each routing read that loses a member,
	// records partitions lost (naming them and their new owner) or hands
	// everything over. Nil discards them. go-redis logs through a package-level logger, so the
	// member started last decides where its logs go for the whole process.
	LogOutput io.Writer

	// LeaveTimeout bounds, on Shutdown, how long the member waits for its
	// leave message to propagate, and then again how long it waits for the
	// cluster to drop it from the routing table (see Member.Shutdown).
	// Default 5s; tests want less.
	LeaveTimeout time.Duration

	// JoinTimeout bounds Start: joining the cluster and the first routing
	// table. Default 30s.
	JoinTimeout time.Duration

	// RoutingRefresh is how often the member re-reads Olric's routing table
	// from the coordinator besides the refreshes triggered by cluster
	// events and not-owner answers. Default 250ms.
	RoutingRefresh time.Duration

	// RoutingLease is how long a routing table read stays valid for
	// execution: an owner whose newest successful read started longer ago
	// than this holds requests instead of executing them, and its writes to
	// Olric are bounded to end with the lease. It must exceed
	// RoutingRefresh. Default 1s.
	RoutingLease time.Duration

	// HandoverGrace is how long a member holds the requests of a partition
	// after it learned that it became the partition's owner. It must exceed
	// RoutingLease: the previous owner stops executing within RoutingLease
	// of the change, so the two never execute the same key at once.
	// Default 1.5s.
	HandoverGrace time.Duration

	// RequestTimeout bounds a request whose context has no deadline,
	// including waits during a hand-over. Default 10s.
	RequestTimeout time.Duration

	// Stripes is the number of per-key lock stripes on the owner. Default
	// 1024.
	Stripes int

	// CacheEntries bounds the owner's cache of the bucket states it wrote
	// (the owner is their only writer, so it need not read them back from
	// Olric); 0 means 1<<20, negative disables the cache.
	CacheEntries int

	// TLS secures the owner channel with mutual TLS 1.3 and is the root
	// of the cluster's trust. Its Certificates (or GetCertificate and
	// GetClientCertificate) are this member's certificate, presented both
	// when it accepts a connection and when it dials another member;
	// RootCAs is the cluster CA that verifies the members it dials,
	// ClientCAs (RootCAs when nil) the members that dial it. Start uses a
	// clone with MinVersion TLS 1.3 and RequireAndVerifyClientCert. A
	// member's certificate must be issued by the cluster CA for both server
	// and client authentication (or without extended key usages) and name
	// its BindAddr (an IP address or DNS subject alternative name): a node
	// is admitted into gossip, and so dialled, sent the password, given
	// partitions or counted as coordinator, only after it proved such a
	// certificate on its owner channel (see the package documentation).
	// With TLS on, Olric's own traffic between members runs through the
	// owner channel's TLS too. Nil, with TLSCertFile, TLSKeyFile and
	// ChannelSecret empty, leaves the channel unauthenticated and
	// membership open to whoever holds the gossip key.
	TLS *tls.Config

	// TLSCertFile, TLSKeyFile and TLSCAFile are PEM files of this member's
	// certificate chain, its private key and the cluster CA, an
	// alternative to TLS with the same meaning, and the production path:
	// the operator's CA issues each member's certificate (cert-manager's
	// tls.crt, tls.key and ca.crt in Kubernetes). All three or none. The
	// member re-reads them four times a HealInterval: a renewed
	// certificate, key or CA is used from the next connection on, without
	// a restart; a replacement that does not parse is logged to LogOutput
	// and the files in use stay in use.
	TLSCertFile, TLSKeyFile, TLSCAFile string

	// RevokedFile, when set, names the cluster's revocation list: one
	// certificate a line, as its serial number in hex (`openssl x509
	// -serial`) or its SHA-256 fingerprint (`openssl x509 -fingerprint
	// -sha256`), colons allowed, '#' starting a comment. It needs channel
	// TLS and is re-read like the TLS files (a list that does not parse is
	// logged, and the previous one stays). A member refuses a listed
	// certificate on every owner-channel connection, closes the
	// connections one already opened and stops gossiping to its holder,
	// whose gossip records it no longer admits: with the list on every
	// member, the holder is declared dead by gossip and its partitions move
	// to the others (see "Trust" in the package documentation).
	RevokedFile string

	// ChannelSecret secures the owner channel without a PKI, an
	// alternative to TLS: every member derives the same Ed25519 CA key from
	// the secret (HKDF-SHA256) and signs a certificate of its own, naming
	// its BindAddr, with it, so the channel is mutual TLS 1.3 as above and
	// the secret never crosses the network. Whoever holds the secret can
	// issue certificates for any name: it is the cluster CA. At least 32
	// random bytes (`openssl rand 32`): Start refuses printable text (a
	// passphrase, or a key still in hex or base64) and bytes that repeat
	// few values with ErrWeakSecret, since a member's certificate lets
	// whoever connects test guesses offline.
	ChannelSecret []byte

	// GossipKeys encrypt and authenticate gossip (memberlist's AES-GCM
	// keyring): GossipKeys[0] encrypts, every key decrypts. Each key is 16,
	// 24 or 32 random bytes (text is refused with ErrWeakSecret, as for
	// ChannelSecret). Rotate keys without downtime with
	// Member.AddGossipKey, UseGossipKey and RemoveGossipKey. Empty leaves
	// gossip in clear text. A gossip key lets its holder take part in
	// gossip, never become a member: that takes a certificate (TLS).
	GossipKeys [][]byte

	// Password is required by Olric's own protocol (its AUTH command) from
	// every client, members included: at least 20 characters, 10 of them
	// distinct (`openssl rand -base64 24`), or Start fails with
	// ErrWeakSecret. With TLS on, members send it only inside the owner
	// channel's TLS. Olric v0.7.4's own listener on BindPort has no TLS and
	// does not limit AUTH attempts, so BindPort must be reachable by
	// nothing but the member's host. Empty leaves Olric's port open to
	// anyone who reaches it.
	Password string

	// Insecure lets a member whose BindAddr or MemberlistBindAddr is not a
	// loopback address start without all three of channel security (TLS,
	// TLSCertFile or ChannelSecret), GossipKeys and Password. Without it,
	// Start refuses such a member with ErrInsecure. A member bound to
	// loopback addresses only needs neither.
	Insecure bool

	// ChannelMaxConns bounds the owner-channel connections this member
	// serves: established ones (one from each other member, plus
	// reconnections) and, separately, a quarter as many (at least 16) that
	// have not finished their handshake; when those are full, the oldest is
	// dropped for the newest. As many again may carry Olric's own traffic
	// from other members (with TLS on, see TLS). Default 256.
	ChannelMaxConns int

	// ChannelIdleTimeout closes an owner-channel connection that brought
	// no request for this long; the caller dials again when it needs to.
	// Default 2m.
	ChannelIdleTimeout time.Duration

	// ChannelIOTimeout bounds each step of the owner channel that waits on
	// the other side: a handshake, the rest of a frame once its header
	// arrived, one flush of writes. Default 5s.
	ChannelIOTimeout time.Duration

	// HealInterval is how often a member asks the members it misses to let
	// it in again: the configured Peers, what Discover finds and every
	// member it saw alive that its gossip now counts dead. Gossip never
	// reconnects members it declared dead, so without this a network split
	// stays two clusters. Default 1s; negative disables it.
	HealInterval time.Duration

	// Quorum, when set, makes a member execute requests only while its
	// gossip sees a majority of the members it last knew (members that
	// left gracefully are forgotten): after a split, the side without a
	// majority answers ErrNoQuorum instead of admitting a second full
	// capacity. Without it both sides answer, and their buckets are merged
	// when the split heals (each side's consumption since the split
	// subtracted once; see "Network splits" in the package documentation).
	Quorum bool

	// LostState is how a member creates a bucket absent from a partition
	// it took over without a readable copy of its state (a previous owner
	// killed, paused or cut off, and no backup): LostEmpty (the default)
	// as if empty at the takeover and refilled since, LostFull full. See
	// "Lost state" in the package documentation.
	LostState LostState

	// ProbeInterval, ProbeTimeout and SuspicionMult tune gossip's failure
	// detection (memberlist's probe period, the wait for an ack, and the
	// suspicion timeout in probe periods before a member is declared
	// dead); they decide how long a crashed member's keys are unavailable.
	// Zero keeps the defaults, 100ms, 50ms and 2; see "Crash fail-over
	// window" in the package documentation.
	ProbeInterval, ProbeTimeout time.Duration
	SuspicionMult               int

	// Leases configures token leases: off unless Leases.Enabled (every
	// bucket) or Leases.Exact (the buckets a lease keeps exact); see
	// LeaseConfig and "Token leases" in the package documentation.
	Leases LeaseConfig

	// listen opens the owner channel's listener; nil means net.Listen.
	// Tests inject failures through it.
	listen func(network, addr string) (net.Listener, error)
	// dial opens the TCP connection to another member's owner channel
	// (requests, and Olric's traffic tunnelled through it); nil means a
	// net.Dialer. The test bed routes it through a delaying proxy.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// DefaultLocalConfig returns a configuration for a member on the loopback
// interface with Olric's default ports (3320, gossip 3322) and the owner
// channel on 3321, one replica, Olric's "local" timings, logging off and no
// security (loopback only: nothing outside the host can reach it).
func DefaultLocalConfig() Config {
	return Config{
		Env:                "local",
		BindAddr:           "127.0.0.1",
		BindPort:           3320,
		ReplicaCount:       1,
		PartitionCount:     271,
		DMap:               "bucketgrid",
		LeaveTimeout:       5 * time.Second,
		JoinTimeout:        30 * time.Second,
		RoutingRefresh:     250 * time.Millisecond,
		RoutingLease:       time.Second,
		HandoverGrace:      1500 * time.Millisecond,
		RequestTimeout:     10 * time.Second,
		Stripes:            1024,
		ChannelMaxConns:    256,
		ChannelIdleTimeout: 2 * time.Minute,
		ChannelIOTimeout:   5 * time.Second,
		HealInterval:       time.Second,
		ProbeInterval:      100 * time.Millisecond,
		ProbeTimeout:       50 * time.Millisecond,
		SuspicionMult:      2,
	}
}

// DefaultLANConfig is DefaultLocalConfig with Olric's "lan" timings and
// BindAddr left for the caller to set to the host's LAN address. Such a
// member starts only with its security configured (TLS or ChannelSecret,
// GossipKeys, Password) or with Insecure set.
func DefaultLANConfig() Config {
	c := DefaultLocalConfig()
	c.Env = "lan"
	c.BindAddr = ""
	return c
}

// Configuration errors returned by Start.
var (
	ErrNoBindAddr = errors.New("bucketgrid/olric: BindAddr is required")
	ErrTimings    = errors.New("bucketgrid/olric: need 0 < RoutingRefresh < RoutingLease < HandoverGrace")
	ErrClock      = errors.New("bucketgrid/olric: Clock must read Unix time")
	// ErrInsecure: the member would be reachable from the network without
	// authentication; configure security or set Insecure.
	ErrInsecure = errors.New("bucketgrid/olric: a member on a non-loopback address needs TLS (or TLSCertFile or ChannelSecret), GossipKeys and Password, or Insecure")
	// ErrSecurity wraps an invalid security setting (a key of the wrong
	// size, unreadable certificate files, two alternatives at once).
	ErrSecurity = errors.New("bucketgrid/olric: invalid security configuration")
)

// withDefaults fills the zero fields and validates c (security settings
// are checked by credentials).
func (c Config) withDefaults() (Config, error) {
	d := DefaultLocalConfig()
	if c.Env == "" {
		c.Env = d.Env
	}
	if c.BindAddr == "" {
		return c, ErrNoBindAddr
	}
	if c.BindPort == 0 {
		c.BindPort = d.BindPort
	}
	if c.MemberlistBindAddr == "" {
		c.MemberlistBindAddr = c.BindAddr
	}
	if c.MemberlistBindPort == 0 {
		c.MemberlistBindPort = c.BindPort + 2
	}
	if c.ReplicaCount <= 0 {
		c.ReplicaCount = d.ReplicaCount
	}
	if c.PartitionCount == 0 {
		c.PartitionCount = d.PartitionCount
	}
	if c.DMap == "" {
		c.DMap = d.DMap
	}
	if c.Clock == nil {
		c.Clock = clock.Wall()
	}
	if !c.Clock.Wall() {
		return c, ErrClock
	}
	if c.LogOutput == nil {
		c.LogOutput = io.Discard
	}
	if c.LeaveTimeout <= 0 {
		c.LeaveTimeout = d.LeaveTimeout
	}
	if c.JoinTimeout <= 0 {
		c.JoinTimeout = d.JoinTimeout
	}
	if c.RoutingRefresh == 0 && c.RoutingLease == 0 && c.HandoverGrace == 0 {
		c.RoutingRefresh, c.RoutingLease, c.HandoverGrace = d.RoutingRefresh, d.RoutingLease, d.HandoverGrace
	}
	if !(0 < c.RoutingRefresh && c.RoutingRefresh < c.RoutingLease && c.RoutingLease < c.HandoverGrace) {
		return c, ErrTimings
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = d.RequestTimeout
	}
	if c.Stripes <= 0 {
		c.Stripes = d.Stripes
	}
	if c.CacheEntries == 0 {
		c.CacheEntries = 1 << 20
	}
	if c.ChannelMaxConns <= 0 {
		c.ChannelMaxConns = d.ChannelMaxConns
	}
	if c.ChannelIdleTimeout <= 0 {
		c.ChannelIdleTimeout = d.ChannelIdleTimeout
	}
	if c.ChannelIOTimeout <= 0 {
		c.ChannelIOTimeout = d.ChannelIOTimeout
	}
	if c.HealInterval == 0 {
		c.HealInterval = d.HealInterval
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = d.ProbeInterval
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = min(d.ProbeTimeout, c.ProbeInterval/2)
	}
	if c.ProbeTimeout >= c.ProbeInterval {
		return c, fmt.Errorf("%w: ProbeTimeout %v must be shorter than ProbeInterval %v", ErrTimings, c.ProbeTimeout, c.ProbeInterval)
	}
	if c.SuspicionMult <= 0 {
		c.SuspicionMult = d.SuspicionMult
	}
	if !c.LostState.valid() {
		return c, fmt.Errorf("%w: %d", ErrLostState, c.LostState)
	}
	if c.listen == nil {
		c.listen = net.Listen
	}
	if c.dial == nil {
		// From BindAddr: the certificate a member presents names it, and
		// the member it dials checks that it names the source address
		// (verifySource).
		var d net.Dialer
		if ip := net.ParseIP(c.BindAddr); ip != nil && !ip.IsUnspecified() {
			d.LocalAddr = &net.TCPAddr{IP: ip}
		}
		c.dial = d.DialContext
	}
	c.Leases = c.Leases.withDefaults()
	return c, nil
}

// loopbackOnly reports whether every address the member binds is a
// loopback address, so that nothing outside the host reaches it.
func (c *Config) loopbackOnly() bool {
	for _, h := range []string{c.BindAddr, c.MemberlistBindAddr} {
		ip := net.ParseIP(h)
		if h != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return true
}
