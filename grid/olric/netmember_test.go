//go:build linux

// The test bed (internal/netbed, network namespaces) needs Linux. Its tests
// are built with and without the race detector: scripts/test runs them all
// in its pass without -race, and TestNetCluster and TestNetStarvedMember
// (a cluster across hosts, pauses and rejoins) again under -race in a step
// of their own. TestNetCrashWindow, which asserts a kill's p99 under 1 s,
// is left out of it: under -race beside 8 busy loops its members took
// 0.75-1.67 s (p99 1.67 s), a timing of the race detector, not of the
// code; it runs without -race. Each member is a process of
// its own, whose races the test's race detector does not see: they reach
// the output on the member's standard error, and that step fails on any
// that is not a known upstream one (scripts/racecheck.go -members). Under
// -race the three first chosen passed with their bounds unchanged (82 s and 101 s of
// wall time in two runs, build included, 446–455 MB the largest resident
// set of a process), and every member reported
// Olric v0.7.4's known race with memberlist (forgiven there). The race pass
// of every package skips ^TestNet; the other test-bed tests were not
// measured under -race.

package olric

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/fnv"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/internal/netbed"
	metrics "github.com/hashicorp/go-metrics/compat"
)

// netMemberEnv makes the test binary a member on a host of the test bed
// (internal/netbed). Its value is a netSpec in JSON. The member is secured
// as in production: mutual TLS with a certificate of the cluster CA naming
// the host's address, gossip key, Olric password. It prints "UP" once
// started and obeys lines on stdin (every answer starts with the command's
// name, or "ERROR"):
//
//	WAIT n mode [s]   waits up to s seconds (90) for a routing table with n
//	                  members and no pending hand-over (mode "whole": nor a
//	                  member missing, nor a bucket left to merge, nor a
//	                  partition it owns left to re-replicate (Replicated);
//	                  "part": no more): "WAIT ms routing-fingerprint", or "WAIT
//	                  timeout" and what it saw
//	GO key n g        g goroutines × n TryConsume(1) on key: "GO admitted"
//	CONSUME p n k [ms] TryConsume(k) on buckets p0 … p(n-1), each bounded by
//	                  ms (2000): "CONSUME admitted failed noquorum i,j,…,-"
//	                  (i, j, … the buckets that admitted)
//	TOKENS p n [ms]   the available tokens of p0 … p(n-1), each check bounded
//	                  by ms (5000), -1 where it failed: "TOKENS t0 t1 …"
//	OWNKEY p n        one of p0 … p(n-1) this member owns: "OWNKEY key"
//	OUTAGE k0 k1 …    checks k0, each attempt bounded by 100 ms, until one
//	                  succeeds, and the other keys at the same time until 1.6 s
//	                  later: "OUTAGE ms0 ms1 … held", ms0 k0's wait, ms1 …
//	                  the others' longest wait between successful checks,
//	                  held the ms k0's failed attempts spent held by a
//	                  hand-over guard
//	LOAD p n s        4 goroutines check p0 … p(n-1) (TryConsume(1), each
//	                  bounded by 2 s) for s seconds: "LOAD checks failed
//	                  noquorum admitted0 … admitted(n-1)"
//	HAMMER key s      4 goroutines TryConsume(1) on key, a bucket of
//	                  hammerCapacity refilling hammerRate a second, each
//	                  check bounded by 2 s, for s seconds: "HAMMER admitted
//	                  failed first-start-ns last-end-ns longest-gap-ms"
//	                  (the gap between successive successful checks)
//	SHRINKS           how many routing reads showed fewer members than the
//	                  read before (hand-overs after a member was lost):
//	                  "SHRINKS n"
//	FAILOVER key      one check of key bounded by 5 s, as a patient caller
//	                  waits out a fail-over: "FAILOVER ms ok-or-error"
//	WATCH p n s [ms]  checks the keys of p0 … p(n-1) this member owns for s
//	                  seconds, a key's next check ms (10) after a success
//	                  (see netWatch): "WATCH keys worst-ms failed
//	                  judged-ms stall-ms kinds from"
//	LATENCY key n     n checks of key, one after the other, each bounded by
//	                  2 s: "LATENCY p50-µs p99-µs failed"
//	COORD             Olric's coordinator in this member's view: "COORD
//	                  name" ("-" if none)
//	HANDOVERS         how many partitions this member guarded after a
//	                  routing read: "HANDOVERS n"
//	GOSSIP            how many times this member's gossip took another
//	                  member for suspect and for dead (see gossipEvents):
//	                  "GOSSIP suspect dead"
//	DEADAT            when this member's gossip last took another member
//	                  for dead: "DEADAT unix-ns" (0: never)
//	OWNED p n         which of p0 … p(n-1) this member owns: "OWNED i …"
//	DEGRADE p n s ms  checks with degrade on and off for s seconds, saying
//	                  when ms have passed (see netDegrade)
//	DEADLINE p n s ms d checks p0 … p(n-1) for s seconds, each bounded by d
//	                  ms, saying when ms have passed (see netDeadline)
//	DRAW p n s [ms [own]] checks p0 … p(n-1) (with "own", those this
//	                  member owns when it reads the command) for s seconds,
//	                  each bounded by ms (1000), buckets of drawCapacity
//	                  (see netDraw)
//	KEYOF addr p n    one of p0 … p(n-1) this member's routing gives to the
//	                  member on host addr: "KEYOF key", "KEYOF -" if none
//	STALL             the longest this process's scheduler kept a goroutine
//	                  sleeping 1 ms from running, beyond the 1 ms, since the
//	                  last STALL (see stallMonitor): "STALL µs"
//	STRICT p n c s ms d slack checks p0 … p(n-1) for s seconds and c
//	                  checks, each bounded by d ms, judged against
//	                  ctx.Deadline with slack ms (see netStrictDeadline)
//	SPEND p n k r ms  r rounds of TryConsume(k) on p0 … p(n-1), buckets of
//	                  spendCapacity, or their tokens with r = 0 (see netSpend)
//	DIAG p i,j,…      what this member sees of buckets pi, pj, … (see
//	                  diag): "DIAG name key=… ;key=… "
//	STOP              shuts the member down and exits
const netMemberEnv = "BUCKETGRID_OLRIC_NETMEMBER"

// netCapacity is the capacity of every bucket of the test-bed tests, but
// HAMMER's.
const netCapacity = 1000

// HAMMER's bucket: hammerCapacity tokens, hammerRate more a second.
const (
	hammerCapacity = 100
	hammerRate     = 50
)

// netSpec is a test-bed member's configuration, passed in netMemberEnv.
type netSpec struct {
	Addr                  string
	Peers                 []string
	Cert, Key, CA         string
	Gossip                []byte
	Password              string
	Replicas              int
	Env                   string
	Refresh, Lease, Grace time.Duration
	LeaveTimeout          time.Duration
	Quorum                bool
	Probe                 time.Duration
	// Via maps another member's owner-channel address to the address of
	// the proxy this member reaches it through.
	Via map[string]string
}

// netPort is the Olric port of every test-bed member: each host has its own
// address, so all use the same ports (gossip on netPort+2).
const netPort = 7320

func netMemberMain() int {
	var s netSpec
	if err := json.Unmarshal([]byte(os.Getenv(netMemberEnv)), &s); err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	c := DefaultLANConfig()
	if s.Env != "" {
		c.Env = s.Env
	}
	c.BindAddr = s.Addr
	c.BindPort = netPort
	c.Peers = s.Peers
	c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = s.Cert, s.Key, s.CA
	c.GossipKeys = [][]byte{s.Gossip}
	c.Password = s.Password
	c.ReplicaCount = s.Replicas
	c.RoutingRefresh, c.RoutingLease, c.HandoverGrace = s.Refresh, s.Lease, s.Grace
	c.LeaveTimeout = s.LeaveTimeout
	c.Quorum = s.Quorum
	if len(s.Via) > 0 {
		c.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if v, ok := s.Via[addr]; ok {
				addr = v
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	if s.Probe > 0 {
		c.ProbeInterval, c.ProbeTimeout = s.Probe, s.Probe/4
	}
	if os.Getenv("NETBED_LOG") != "" {
		c.LogOutput = os.Stderr
	}
	c.JoinTimeout = 60 * time.Second
	var gossip gossipEvents
	mc := metrics.DefaultConfig("")
	mc.EnableRuntimeMetrics = false
	if _, err := metrics.NewGlobal(mc, &gossip); err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	m, err := Start(context.Background(), c)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fmt.Println("UP")
	stalls := newStallMonitor()
	cfg, _ := core.NewConfig(core.Intervally(netCapacity, netCapacity, time.Hour))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		arg := func(i int) int { n, _ := strconv.Atoi(f[i]); return n }
		switch f[0] {
		case "WAIT":
			start := time.Now()
			limit := 90 * time.Second
			if len(f) > 3 {
				limit = time.Duration(arg(3)) * time.Second
			}
			for {
				r := m.routing.current()
				if r.members == arg(1) && (f[2] != "whole" || !r.split && m.journal.Len() == 0 && m.Replicated()) && !guarded(m, r) {
					h := fnv.New64a()
					for _, o := range r.owners {
						h.Write([]byte(o + ","))
					}
					fmt.Println("WAIT", time.Since(start).Milliseconds(), h.Sum64())
					break
				}
				if time.Since(start) > limit {
					fmt.Println("WAIT timeout", r.members, "members in routing, gossip sees", m.members.ml.NumMembers(), "split", r.split, "journal", m.journal.Len(), "guarded", guarded(m, r), "unreplicated", len(m.exec.resync.pending(r)))
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		case "GO":
			fmt.Println("GO", consumeConcurrently(m, f[1], &cfg, arg(2), arg(3)))
		case "LOAD":
			n := arg(2)
			admitted := make([]atomic.Int64, n)
			var checks, failed, noQuorum atomic.Int64
			end := time.Now().Add(time.Duration(arg(3)) * time.Second)
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for i := g; time.Now().Before(end); i++ {
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
						resp, err := m.Execute(ctx, f[1]+strconv.Itoa(i%n), consumeReq(&cfg, 1))
						cancel()
						checks.Add(1)
						switch {
						case err != nil:
							failed.Add(1)
							if errors.Is(err, ErrNoQuorum) {
								noQuorum.Add(1)
							}
						case resp.Results[0].OK:
							admitted[i%n].Add(1)
						}
					}
				})
			}
			wg.Wait()
			out := []string{"LOAD", strconv.FormatInt(checks.Load(), 10), strconv.FormatInt(failed.Load(), 10), strconv.FormatInt(noQuorum.Load(), 10)}
			for i := range admitted {
				out = append(out, strconv.FormatInt(admitted[i].Load(), 10))
			}
			fmt.Println(strings.Join(out, " "))
		case "HAMMER":
			// A bucket that refills: 100 tokens, 50 a second.
			rcfg, _ := core.NewConfig(core.Greedy(hammerCapacity, hammerRate, time.Second))
			var admitted, failed atomic.Int64
			var mu sync.Mutex
			var first, last time.Time
			var lastOK time.Time
			var gap time.Duration
			end := time.Now().Add(time.Duration(arg(2)) * time.Second)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for time.Now().Before(end) {
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
						t0 := time.Now()
						resp, err := m.Execute(ctx, f[1], consumeReq(&rcfg, 1))
						t1 := time.Now()
						cancel()
						mu.Lock()
						if first.IsZero() || t0.Before(first) {
							first = t0
						}
						last = t1
						if err == nil {
							if !lastOK.IsZero() {
								gap = max(gap, t1.Sub(lastOK))
							}
							lastOK = t1
						}
						mu.Unlock()
						switch {
						case err != nil:
							failed.Add(1)
						case resp.Results[0].OK:
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			fmt.Println("HAMMER", admitted.Load(), failed.Load(), first.UnixNano(), last.UnixNano(), gap.Milliseconds())
		case "SHRINKS":
			fmt.Println("SHRINKS", m.routing.shrinks.Load())
		case "CONSUME":
			admitted, failed, noQuorum := 0, 0, 0
			which := []string{}
			timeout := 2 * time.Second
			if len(f) > 4 {
				timeout = time.Duration(arg(4)) * time.Millisecond
			}
			for i := range arg(2) {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				resp, err := m.Execute(ctx, f[1]+strconv.Itoa(i), consumeReq(&cfg, int64(arg(3))))
				cancel()
				switch {
				case errors.Is(err, ErrNoQuorum):
					noQuorum++
					failed++
				case err != nil:
					failed++
				case resp.Results[0].OK:
					admitted++
					which = append(which, strconv.Itoa(i))
				}
			}
			fmt.Println("CONSUME", admitted, failed, noQuorum, strings.Join(append(which, "-"), ","))
		case "TOKENS":
			out := []string{"TOKENS"}
			timeout := 5 * time.Second
			if len(f) > 3 {
				timeout = time.Duration(arg(3)) * time.Millisecond
			}
			for i := range arg(2) {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				resp, err := m.Execute(ctx, f[1]+strconv.Itoa(i), availableReq(&cfg))
				cancel()
				switch {
				case err != nil:
					out = append(out, "-1")
				case resp.Status != wire.StatusOK:
					fmt.Fprintln(os.Stderr, "TOKENS:", resp.Status, resp.Message)
					out = append(out, "-2")
				default:
					out = append(out, strconv.FormatInt(resp.Results[0].Tokens, 10))
				}
			}
			fmt.Println(strings.Join(out, " "))
		case "OWNKEY":
			key := "-"
			for i := range arg(2) {
				if k := f[1] + strconv.Itoa(i); m.Owner(k) == m.Name() {
					key = k
					break
				}
			}
			fmt.Println("OWNKEY", key)
		case "OUTAGE":
			// k0 checked until one check succeeds; the other keys checked
			// meanwhile and 1.6 s longer (a hand-over guard that came later
			// would hold them then), for their longest wait between
			// successful checks.
			out := make([]string, len(f)-1)
			var held atomic.Int64
			var wg sync.WaitGroup
			done := make(chan struct{})
			var end atomic.Int64
			for i, key := range f[1:] {
				wg.Go(func() {
					start := time.Now()
					last, worst := start, time.Duration(0)
					// k0's owner and error whenever either changed: written
					// to stderr when k0 waited over a second.
					var trace []string
					var was string
					for {
						t0 := time.Now()
						ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
						_, err := m.Execute(ctx, key, availableReq(&cfg))
						cancel()
						if i == 0 {
							now := fmt.Sprint(m.Owner(key), " ", err)
							if now != was && len(trace) < 100 {
								trace = append(trace, fmt.Sprintf("+%dms owner %s", time.Since(start).Milliseconds(), now))
							}
							was = now
						}
						if i == 0 && err == nil {
							if time.Since(start) > time.Second {
								fmt.Fprintf(os.Stderr, "OUTAGE of %s on %s took %v:\n\t%s\n", key, m.Name(), time.Since(start), strings.Join(trace, "\n\t"))
							}
							out[0] = strconv.FormatInt(time.Since(start).Milliseconds(), 10)
							end.Store(time.Now().Add(1600 * time.Millisecond).UnixNano())
							close(done)
							return
						}
						if err == nil {
							worst, last = max(worst, time.Since(last)), time.Now()
						} else if i == 0 && strings.Contains(err.Error(), "hand-over") {
							held.Add(int64(time.Since(t0)))
						}
						select {
						case <-done:
							if time.Now().UnixNano() > end.Load() {
								out[i] = strconv.FormatInt(max(worst, time.Since(last)).Milliseconds(), 10)
								return
							}
						default:
						}
					}
				})
			}
			wg.Wait()
			fmt.Println("OUTAGE", strings.Join(out, " "), time.Duration(held.Load()).Milliseconds())
		case "FAILOVER":
			// key checked at once by a patient caller (one check bounded
			// by 5 s) and, meanwhile, by the OUTAGE loop: "FAILOVER
			// patient-ms error-or-ok".
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := m.Execute(ctx, f[1], availableReq(&cfg))
			cancel()
			res := "ok"
			if err != nil {
				res = strings.ReplaceAll(err.Error(), " ", "_")
			}
			fmt.Println("FAILOVER", time.Since(t0).Milliseconds(), res)
		case "WATCH":
			pace := 10 * time.Millisecond
			if len(f) > 4 {
				pace = time.Duration(arg(4)) * time.Millisecond
			}
			netWatch(m, &cfg, stalls, f[1], arg(2), arg(3), pace)
		case "LATENCY":
			// n checks of key one after the other.
			var took []time.Duration
			failed := 0
			for range arg(2) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				t0 := time.Now()
				_, err := m.Execute(ctx, f[1], availableReq(&cfg))
				took = append(took, time.Since(t0))
				cancel()
				if err != nil {
					failed++
				}
			}
			slices.Sort(took)
			fmt.Println("LATENCY", took[len(took)/2].Microseconds(), took[(len(took)*99+99)/100-1].Microseconds(), failed)
		case "COORD":
			fmt.Println("COORD", coordinator(m))
		case "HANDOVERS":
			fmt.Println("HANDOVERS", m.routing.handovers.Load())
		case "GOSSIP":
			fmt.Println("GOSSIP", gossip.suspect.Load(), gossip.dead.Load())
		case "DEADAT":
			fmt.Println("DEADAT", gossip.deadAt.Load())
		case "OWNED":
			out := []string{"OWNED"}
			for i := range arg(2) {
				if m.Owner(f[1]+strconv.Itoa(i)) == m.Name() {
					out = append(out, strconv.Itoa(i))
				}
			}
			fmt.Println(strings.Join(out, " "))
		case "DEGRADE":
			netDegrade(m, f[1], arg(2), arg(3), arg(4))
		case "DEADLINE":
			netDeadline(m, &cfg, f[1], arg(2), arg(3), arg(4), arg(5))
		case "DRAW":
			bound := time.Second
			if len(f) > 4 {
				bound = time.Duration(arg(4)) * time.Millisecond
			}
			netDraw(m, f[1], arg(2), arg(3), bound, len(f) > 5 && f[5] == "own")
		case "KEYOF":
			key := "-"
			for i := range arg(3) {
				if k := f[2] + strconv.Itoa(i); strings.HasPrefix(m.Owner(k), f[1]+":") {
					key = k
					break
				}
			}
			fmt.Println("KEYOF", key)
		case "DIAG":
			var keys []string
			for _, i := range strings.Split(f[2], ",") {
				keys = append(keys, f[1]+i)
			}
			fmt.Println("DIAG", m.Name(), diag(m, keys))
		case "STALL":
			fmt.Println("STALL", stalls.worst.Swap(0)/int64(time.Microsecond))
		case "STRICT":
			netStrictDeadline(m, &cfg, stalls, f[1], arg(2), arg(3), arg(4), arg(5), arg(6), arg(7))
		case "SPEND":
			netSpend(m, f[1], arg(2), arg(3), arg(4), arg(5))
		case "STOP":
			return stopMember(m, 20*time.Second)
		default:
			fmt.Println("ERROR unknown command", f[0])
		}
	}
	return 0
}

func init() { children[netMemberEnv] = netMemberMain }

// gossipEvents counts gossip's own verdicts in a member's process, through
// the counters memberlist keeps (go-metrics): memberlist.msg.suspect when
// this member's view of another turns from alive to suspect, and
// memberlist.msg.dead when it turns to dead (or left, a graceful leave).
// memberlist counts only such changes: a repeated or refuted message, or
// one about this member itself, counts nothing.
// deadAt is when (Unix nanoseconds) the latest death was counted.
type gossipEvents struct{ suspect, dead, deadAt atomic.Int64 }

func (g *gossipEvents) IncrCounterWithLabels(key []string, _ float32, _ []metrics.Label) {
	switch strings.Join(key, ".") {
	case "memberlist.msg.suspect":
		g.suspect.Add(1)
	case "memberlist.msg.dead":
		g.dead.Add(1)
		g.deadAt.Store(time.Now().UnixNano())
	}
}

func (g *gossipEvents) IncrCounter(key []string, val float32)                { g.IncrCounterWithLabels(key, val, nil) }
func (*gossipEvents) SetGauge([]string, float32)                             {}
func (*gossipEvents) SetGaugeWithLabels([]string, float32, []metrics.Label)  {}
func (*gossipEvents) EmitKey([]string, float32)                              {}
func (*gossipEvents) AddSample([]string, float32)                            {}
func (*gossipEvents) AddSampleWithLabels([]string, float32, []metrics.Label) {}

// netCluster is a cluster of members, one per host of a test bed.
type netCluster struct {
	bed     *netbed.Bed
	proxies []*netbed.Proxy
	kids    []*child
	procs   []*netbed.Proc
	specs   []netSpec
}

// netTimings are a test-bed cluster's settings; zero fields keep
// DefaultLANConfig's.
type netTimings struct {
	Replicas              int
	Env                   string
	Refresh, Lease, Grace time.Duration
	Quorum                bool
	// Probe is gossip's probe interval (ProbeInterval; ProbeTimeout a
	// quarter of it), 0 for DefaultLANConfig's.
	Probe time.Duration
	// Delay, when not 0, routes every member's connections to the others'
	// owner channels (requests, and Olric's traffic tunnelled through
	// them) through a proxy on its own host that delays each direction by
	// Delay (netCluster.proxies; UDP gossip is not slowed).
	Delay time.Duration
}

// startNetCluster starts one member on each of n hosts of a new test bed,
// secured as in production (a CA, a certificate per host naming its
// address, a gossip key, a password), each given every host as its peers,
// and waits until each reads a routing table of n members.
func startNetCluster(t *testing.T, n int, tm netTimings) *netCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("creates network namespaces and starts processes")
	}
	bed := netbed.New(t, n)
	ca := newTestCA(t, "test-bed CA")
	gossip, password := randomKey(t, 32), rand.Text()
	c := &netCluster{bed: bed}
	d := DefaultLANConfig()
	if tm.Replicas == 0 {
		tm.Replicas = 1
	}
	if tm.Refresh == 0 {
		tm.Refresh, tm.Lease, tm.Grace = d.RoutingRefresh, d.RoutingLease, d.HandoverGrace
	}
	// Every member is given every host, as in production: members started
	// together form one cluster, and a member restarted later joins the
	// others whichever it is.
	var peers []string
	for _, h := range bed.Hosts {
		peers = append(peers, net.JoinHostPort(h.Addr, strconv.Itoa(netPort+2)))
	}
	via := make([]map[string]string, n)
	if tm.Delay > 0 {
		for _, h := range bed.Hosts {
			via[h.Index] = map[string]string{}
			for _, o := range bed.Hosts {
				if o != h {
					target := net.JoinHostPort(o.Addr, strconv.Itoa(netPort+1))
					p := bed.Proxy(h, net.JoinHostPort(h.Addr, "0"), h, target, tm.Delay)
					via[h.Index][target] = p.Addr()
					c.proxies = append(c.proxies, p)
				}
			}
		}
	}
	for _, h := range bed.Hosts {
		cert, key, caFile := ca.hostFiles(t, h.Addr)
		s := netSpec{
			Addr: h.Addr, Peers: peers, Cert: cert, Key: key, CA: caFile,
			Gossip: gossip, Password: password, Replicas: tm.Replicas, Env: tm.Env,
			Refresh: tm.Refresh, Lease: tm.Lease, Grace: tm.Grace, LeaveTimeout: time.Second, Quorum: tm.Quorum, Probe: tm.Probe, Via: via[h.Index],
		}
		c.specs = append(c.specs, s)
		c.start(t, h.Index)
	}
	for _, k := range c.kids {
		k.expect(t, "UP")
	}
	c.wait(t, n, c.kids...)
	return c
}

// start starts (or restarts) the member of host i.
// restart starts member i again on its host (after a kill) and waits
// until it is up. A member restarted at its address moments after its
// kill can fail Start (Olric's join timing out while gossip still settles
// the old process's death, seen at load 11-17 beside busy loops), as a
// supervisor would see it exit; like one, restart starts it again, at
// most three times.
func (c *netCluster) restart(t *testing.T, i int) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		c.start(t, i)
		k := c.kids[i]
		failed := ""
		for failed == "" && k.out.Scan() {
			line := k.out.Text()
			switch {
			case strings.HasPrefix(line, "UP"):
				return
			case strings.HasPrefix(line, "ERROR"):
				failed = line
			}
		}
		if failed == "" {
			t.Fatalf("member %d ended while starting again: %v", i, k.out.Err())
		}
		if attempt == 3 {
			t.Fatalf("member %d did not start again in %d attempts: %s", i, attempt, failed)
		}
		t.Logf("member %d did not start again (attempt %d): %s; starting it once more", i, attempt, failed)
	}
}

func (c *netCluster) start(t *testing.T, i int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(c.specs[i])
	cmd := c.bed.Hosts[i].Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), netMemberEnv+"="+string(spec))
	cmd.Stderr = os.Stderr // a race detector's reports included: see the top of this file
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := c.bed.Start(cmd)
	k := &child{cmd: cmd, in: in, out: childScanner(out)}
	if i < len(c.kids) {
		c.kids[i], c.procs[i] = k, p
	} else {
		c.kids, c.procs = append(c.kids, k), append(c.procs, p)
	}
}

// wait has each of kids wait for a stable routing table of n members and
// checks that they all read the same one.
func (c *netCluster) wait(t *testing.T, n int, kids ...*child) time.Duration {
	t.Helper()
	var worst time.Duration
	prints := map[string]bool{}
	cmd := fmt.Sprint("WAIT ", n, " part")
	if n == len(c.kids) {
		cmd = fmt.Sprint("WAIT ", n, " whole")
	}
	for _, k := range kids {
		k.send(t, cmd)
	}
	for _, k := range kids {
		f := strings.Fields(k.expect(t, "WAIT"))
		if f[0] == "timeout" {
			t.Fatalf("no stable routing table of %d members: %s", n, strings.Join(f, " "))
		}
		ms, _ := strconv.Atoi(f[0])
		worst = max(worst, time.Duration(ms)*time.Millisecond)
		prints[f[1]] = true
	}
	if len(prints) > 1 {
		// Tables may differ for a moment after a change: ask again.
		for _, k := range kids {
			k.send(t, cmd)
		}
		prints = map[string]bool{}
		for _, k := range kids {
			f := strings.Fields(k.expect(t, "WAIT"))
			if f[0] == "timeout" {
				t.Fatalf("no stable routing table of %d members: %s", n, strings.Join(f, " "))
			}
			prints[f[1]] = true
		}
		if len(prints) > 1 {
			t.Errorf("members read %d different routing tables", len(prints))
		}
	}
	return worst
}

// stop shuts every member that still runs down.
func (c *netCluster) stop(t *testing.T) {
	t.Helper()
	for i, k := range c.kids {
		select {
		case <-c.procs[i].Done():
			continue
		default:
		}
		k.send(t, "STOP")
	}
	for _, p := range c.procs {
		p.Wait()
	}
}

// hostFiles writes a member certificate for the host at addr (its IP in
// the subject alternative names, and as common name), its key and the CA
// as PEM files, and returns their paths.
func (ca *testCA) hostFiles(t testing.TB, addr string) (cert, key, caFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: addr},
		IPAddresses:  []net.IP{net.ParseIP(addr)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, ca.cert, &k.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("member.pem", "CERTIFICATE", der), write("member.key", "EC PRIVATE KEY", kb), write("ca.pem", "CERTIFICATE", ca.cert.Raw)
}

// TestNetCluster runs three secured members on three hosts of the test bed
// and has each consume from one bucket concurrently: exactly the capacity
// is admitted across hosts.
func TestNetCluster(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{})
	// 3 hosts × 4 goroutines × 500 = 6000 attempts on capacity 1000.
	for _, k := range c.kids {
		k.send(t, "GO shared 500 4")
	}
	total := 0
	for _, k := range c.kids {
		n, _ := strconv.Atoi(k.expect(t, "GO"))
		total += n
	}
	if total != netCapacity {
		t.Errorf("admitted %d across hosts, want exactly %d", total, netCapacity)
	}
	c.stop(t)
}
