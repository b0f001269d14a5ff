package olric

import (
	"errors"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
)

// Config configures one member: the embedded Olric member and the owner
// channel that carries bucket requests between members.
//
// Start it from DefaultLocalConfig or DefaultLANConfig and change what
// differs; Start rejects a configuration that would silently misbehave
// (timing parameters that break the hand-over guard, a missing address).
type Config struct {
	// Env is the Olric and memberlist environment profile, "local" or
	// "lan"; it sets gossip and failure-detection timings.
	Env string

	// BindAddr and BindPort are the address Olric serves its own protocol
	// on. BindAddr:BindPort is the member's name in the cluster. Olric does
	// not support port 0 here.
	BindAddr string
	BindPort int

	// MemberlistBindAddr and MemberlistBindPort are the gossip address;
	// empty and 0 mean BindAddr and BindPort+2.
	MemberlistBindAddr string
	MemberlistBindPort int

	// ChannelAddr is the listen address of the owner channel, host:port.
	// Port 0 picks a free port. The address is published to the other
	// members in an Olric DMap; a host that is empty or unspecified is
	// advertised as BindAddr. Empty means BindAddr with port BindPort+1.
	ChannelAddr string

	// Peers are the memberlist addresses (host:port) of members to join;
	// empty starts a new cluster.
	Peers []string

	// ReplicaCount is Olric's replica count: 1 keeps one copy of each
	// bucket (a member that leaves or crashes takes its buckets with it:
	// they reset to full), 2 keeps a synchronous backup on another member
	// (nothing lost when one member leaves, 3-5x slower writes).
	ReplicaCount int

	// PartitionCount is Olric's partition count; every member must use the
	// same value. Default 271.
	PartitionCount uint64

	// DMap is the name of the Olric DMap holding the buckets. The member
	// registry lives in DMap+".members". Default "bucketgrid".
	DMap string

	// Clock is the time of every bucket this member owns. It must read Unix
	// time (Clock.Wall() true), or Start returns ErrClock. Default
	// clock.Wall().
	Clock clock.Clock

	// LogOutput receives Olric's, memberlist's and go-redis's logs. Nil
	// discards them. go-redis logs through a package-level logger, so the
	// member started last decides where its logs go for the whole process.
	LogOutput io.Writer

	// LeaveTimeout bounds how long Olric waits for its leave message to
	// propagate on Shutdown. Default 5s; tests want less.
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
	// than this holds requests instead of executing them. It must exceed
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
}

// DefaultLocalConfig returns a configuration for a member on the loopback
// interface with Olric's default ports (3320, gossip 3322) and the owner
// channel on 3321, one replica, Olric's "local" timings and logging off.
func DefaultLocalConfig() Config {
	return Config{
		Env:            "local",
		BindAddr:       "127.0.0.1",
		BindPort:       3320,
		ReplicaCount:   1,
		PartitionCount: 271,
		DMap:           "bucketgrid",
		LeaveTimeout:   5 * time.Second,
		JoinTimeout:    30 * time.Second,
		RoutingRefresh: 250 * time.Millisecond,
		RoutingLease:   time.Second,
		HandoverGrace:  1500 * time.Millisecond,
		RequestTimeout: 10 * time.Second,
		Stripes:        1024,
	}
}

// DefaultLANConfig is DefaultLocalConfig with Olric's "lan" timings and
// BindAddr left for the caller to set to the host's LAN address.
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
)

// withDefaults fills the zero fields and validates c.
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
	if c.ChannelAddr == "" {
		c.ChannelAddr = net.JoinHostPort(c.BindAddr, strconv.Itoa(c.BindPort+1))
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
	return c, nil
}
