package olric

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/goleak"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/trust"
)

// rogue is a node that joins gossip as an Olric member would: memberlist
// with Olric's metadata under the name 127.0.0.1:P, something listening on
// P (its "Olric port", which records who connects and what password they
// send) and on P+1 (its "owner channel", which answers the identity
// question as a member would, over plain TCP or over TLS with cert).
type rogue struct {
	name     string
	port     int
	ml       *memberlist.Memberlist
	olric    atomic.Int64 // connections to its Olric port
	channel  atomic.Int64 // connections to its owner channel
	mu       sync.Mutex
	auth     []string // passwords received
	password string   // what it answers the identity question with
	lns      []net.Listener
	wg       sync.WaitGroup

	// relay, when set, is a member's owner channel: the rogue answers an
	// identity question with the proof that member gives to the same
	// question, asked over the rogue's own connection with relayCert.
	relay     string
	relayCert *tls.Certificate
	// meta, when set, is the Olric metadata the rogue gossips and claims
	// instead of its own (a real member's, replayed).
	meta []byte
	// answerer, when set, answers the identity question the way a member
	// does, with the rogue's record and its own credentials.
	answerer *Member
}

// rogueOption sets up a rogue before it joins gossip.
type rogueOption func(*rogue)

// rogueMeta is Olric's node metadata (discovery.Member, msgpack).
type rogueMeta struct {
	Name      string
	NameHash  uint64
	ID        uint64
	Birthdate int64
}

type rogueDelegate struct{ meta []byte }

func (d rogueDelegate) NodeMeta(int) []byte             { return d.meta }
func (d rogueDelegate) NotifyMsg([]byte)                {}
func (d rogueDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (d rogueDelegate) LocalState(bool) []byte          { return nil }
func (d rogueDelegate) MergeRemoteState([]byte, bool)   {}
func (r *rogue) listen(t *testing.T, port int) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	r.lns = append(r.lns, l)
	return l
}

// startRogue joins the cluster at every one of seeds (a state sync with
// each, so that each member hears of it at once) with keys (none: clear text),
// claiming birthdate; cert, when not nil, is what its owner channel
// presents over TLS.
func startRogue(t *testing.T, seeds []string, keys [][]byte, birthdate int64, cert *tls.Certificate, password string, opts ...rogueOption) *rogue {
	t.Helper()
	p := freeBase(t)
	r := &rogue{name: net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), port: p, password: password}
	for _, o := range opts {
		o(r)
	}
	t.Cleanup(r.stop)
	ol, cl := r.listen(t, p), r.listen(t, p+1)
	r.wg.Go(func() { r.serveOlric(ol) })
	c := memberlist.DefaultLocalConfig()
	c.Name, c.BindAddr, c.BindPort, c.AdvertisePort, c.LogOutput = r.name, "127.0.0.1", p+2, p+2, io.Discard
	buf := binary.BigEndian.AppendUint64(nil, uint64(birthdate))
	meta, err := msgpack.Marshal(rogueMeta{Name: r.name, NameHash: xxhash.Sum64String(r.name), ID: xxhash.Sum64(append(buf, r.name...)), Birthdate: birthdate})
	if err != nil {
		t.Fatal(err)
	}
	if r.meta != nil {
		meta = r.meta
	}
	c.Delegate = rogueDelegate{meta}
	if len(keys) > 0 {
		if c.Keyring, err = memberlist.NewKeyring(keys[1:], keys[0]); err != nil {
			t.Fatal(err)
		}
	}
	gossip := net.JoinHostPort("127.0.0.1", strconv.Itoa(p+2))
	r.wg.Go(func() { r.serveChannel(cl, cert, meta, gossip) })
	if r.ml, err = memberlist.Create(c); err != nil {
		t.Fatal(err)
	}
	if len(seeds) == 0 {
		return r
	}
	if _, err := r.ml.Join(seeds); err != nil {
		t.Fatalf("the rogue could not even join gossip: %v", err)
	}
	return r
}

func (r *rogue) stop() {
	if r.ml != nil {
		r.ml.Shutdown()
	}
	for _, l := range r.lns {
		l.Close()
	}
	r.wg.Wait()
}

// serveOlric records connections and AUTH passwords and answers +OK.
func (r *rogue) serveOlric(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		r.wg.Go(func() { r.olricConn(c) })
	}
}

// olricConn records an Olric connection (direct or tunnelled) and the
// AUTH passwords sent on it.
func (r *rogue) olricConn(c net.Conn) {
	r.olric.Add(1)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	var args []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if !strings.HasPrefix(line, "$") {
			continue
		}
		arg, _ := br.ReadString('\n')
		args = append(args, strings.TrimSpace(arg))
		if len(args) == 2 && strings.EqualFold(args[0], "auth") {
			r.mu.Lock()
			r.auth = append(r.auth, args[1])
			r.mu.Unlock()
			c.Write([]byte("+OK\r\n"))
		}
	}
}

// serveChannel answers the identity question with the rogue's record
// and takes tunnelled Olric connections to its Olric recorder.
func (r *rogue) serveChannel(l net.Listener, cert *tls.Certificate, meta []byte, gossip string) {
	if r.meta != nil {
		meta = r.meta
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		r.channel.Add(1)
		r.wg.Go(func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if cert != nil {
				tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*cert}, ClientAuth: tls.RequestClientCert})
				if tc.Handshake() != nil {
					return
				}
				c = tc
			}
			var pre [5]byte
			if _, err := io.ReadFull(c, pre[:]); err != nil {
				return
			}
			switch string(pre[:4]) {
			case "BGOT":
				r.olricConn(c)
				return
			case "BGOC": // the bucket channel
				return
			}
			if r.answerer != nil {
				r.answerer.trust.mu.Lock()
				r.answerer.trust.self = &trust.Record{Meta: string(meta), Addr: gossip}
				r.answerer.trust.mu.Unlock()
				r.answerer.trust.serveIdentity(c)
				return
			}
			br := bufio.NewReader(c)
			// The question: a nonce, and (other than the first version,
			// "BGOI") the asker's name.
			q := make([]byte, trust.NonceLen)
			if _, err := io.ReadFull(br, q); err != nil {
				return
			}
			if string(pre[:4]) != "BGOI" {
				f, err := trust.ReadField(br, trust.MaxAddr)
				if err != nil {
					return
				}
				q = trust.AppendField(q, f)
			}
			tail := make([]byte, 33)
			if r.password != "" {
				tail = append([]byte{trust.ProofFlagPw}, nonceMAC(r.password, q[:trust.NonceLen])...)
			}
			if r.relay != "" {
				if tail = r.relayed(append(pre[:], q...)); tail == nil {
					return
				}
			}
			c.Write(append(trust.AppendField(trust.AppendField(nil, meta), []byte(gossip)), tail...))
		})
	}
}

// nonceMAC is the proof of the first identity question: an HMAC with the
// password over the asker's nonce alone.
func nonceMAC(password string, nonce []byte) []byte {
	h := hmac.New(sha256.New, []byte(password))
	h.Write([]byte("bucketgrid/olric password v1"))
	h.Write(nonce)
	return h.Sum(nil)
}

// relayed asks the member at r.relay the question q and returns the flags
// and proof of its answer, or nil.
func (r *rogue) relayed(q []byte) []byte {
	raw, err := net.Dial("tcp", r.relay)
	if err != nil {
		return nil
	}
	c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{*r.relayCert}})
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(q); err != nil {
		return nil
	}
	br := bufio.NewReader(c)
	for range 2 {
		if _, err := trust.ReadField(br, trust.MaxMeta); err != nil {
			return nil
		}
	}
	tail := make([]byte, 33)
	if _, err := io.ReadFull(br, tail); err != nil {
		return nil
	}
	return tail
}

func (r *rogue) passwords() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auth...)
}

// grid is what a rogue must not disturb: the members' checks stay exact
// and available.
type gridLoad struct {
	keys  []string
	done  []atomic.Int64
	errs  atomic.Int64
	first atomic.Pointer[error]
	stop  chan struct{}
	wg    sync.WaitGroup
}

func startGridLoad(ms []*Member, prefix string) *gridLoad {
	return startLoadOn(ms, keySet(prefix, 60))
}

// startLoadOn is startGridLoad on the given keys.
func startLoadOn(ms []*Member, keys []string) *gridLoad {
	g := &gridLoad{keys: keys, stop: make(chan struct{})}
	g.done = make([]atomic.Int64, len(g.keys))
	cfg := testBucket(1 << 40)
	for w, m := range ms {
		g.wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-g.stop:
					return
				default:
				}
				k := i % len(g.keys)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := m.Execute(ctx, g.keys[k], consumeReq(&cfg, 1))
				cancel()
				if err != nil {
					g.errs.Add(1)
					g.first.CompareAndSwap(nil, &err)
					continue
				}
				g.done[k].Add(1)
			}
		})
	}
	return g
}

// finish stops the load and checks every check succeeded and every bucket
// holds exactly what was taken from it.
func (g *gridLoad) finish(t *testing.T, ms []*Member) {
	t.Helper()
	close(g.stop)
	g.wg.Wait()
	if n := g.errs.Load(); n > 0 {
		t.Errorf("%d checks failed during the attack, first: %v", n, *g.first.Load())
	}
	cfg := testBucket(1 << 40)
	total := int64(0)
	for i, k := range g.keys {
		r, err := ms[i%len(ms)].Execute(context.Background(), k, availableReq(&cfg))
		if err != nil {
			t.Fatal(err)
		}
		total += g.done[i].Load()
		if got, want := r.Results[0].Tokens, int64(1<<40)-g.done[i].Load(); got != want {
			t.Errorf("%s: %d tokens, want %d", k, got, want)
		}
	}
	if total == 0 {
		t.Error("no check completed during the attack")
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// TestRogueMember runs, against a secured 3-member cluster, a node that
// holds the gossip key (and in some cases the password, or a certificate)
// but no certificate of the cluster CA naming it, claiming the oldest
// Birthdate so as to become Olric's coordinator. Before, such a node was
// dialled by every member within 2 s and sent the password in clear text,
// got partitions within 13 s and, as coordinator, failed every member's
// keys. Now no member admits it: it stays out of every member list and
// routing table, nobody connects to its Olric port or sends it a password,
// the coordinator stays the oldest real member, and the members' checks
// stay exact and available throughout. TestRogueControl shows the same
// node admitted where nothing requires a certificate.
func TestRogueMember(t *testing.T) {
	s := newSecrets(t)
	ms := startCluster(t, 3, s.secure(t))
	var seeds []string
	for _, m := range ms {
		seeds = append(seeds, memberlistAddr(m.cfg))
	}
	wrong := newSecrets(t)
	unnamed := s.ca.leafFor(t, net.IPv4(127, 0, 0, 2)) // the cluster CA's, for another host
	coordinator := func(m *Member) string {
		members, err := m.node.client.Members(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, mb := range members {
			if mb.Coordinator {
				return mb.Name
			}
		}
		return ""
	}
	oldest := coordinator(ms[0])
	named := s.ca.leaf(t) // the cluster CA's, naming the rogue's host
	for _, tc := range []struct {
		name     string
		cert     *tls.Certificate
		password string
		opt      rogueOption
	}{
		{name: "gossip key only, plain owner channel"},
		{name: "gossip key and password, another CA's certificate", cert: ptr(wrong.ca.leaf(t)), password: s.password},
		{name: "gossip key and password, a cluster certificate naming another host", cert: &unnamed, password: s.password},
		// The proof a member gives was a password HMAC over the
		// asker's nonce alone, so a rogue without the password asked a
		// real member the question it was asked and passed the answer on.
		{name: "gossip key and a cluster certificate, no password, relaying a member's proof", cert: &named, opt: func(r *rogue) {
			r.relay, r.relayCert = ms[0].ChannelAddr(), &named
		}},
		// A real member's metadata under another gossip name,
		// proven with every credential (its own certificate, the password).
		{name: "every credential, a real member's metadata under another name", cert: &named, password: s.password, opt: func(r *rogue) {
			r.meta = ms[1].members.ml.LocalNode().Meta
			r.answerer = &Member{cfg: Config{ChannelIOTimeout: 5 * time.Second}, name: r.name}
			r.answerer.trust.init(r.answerer, credentials{password: s.password})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			load := startGridLoad(ms, "rogue-"+strconv.Itoa(len(tc.name))+"-")
			var opts []rogueOption
			if tc.opt != nil {
				opts = append(opts, tc.opt)
			}
			r := startRogue(t, seeds, [][]byte{s.gossip}, 1, tc.cert, tc.password, opts...)
			// Every member hears of it through gossip and tries it (that is
			// how the veto shows it ran); then give the old attack its
			// time: members dialled its Olric port within 2 s.
			t0 := time.Now()
			tried := func() (failed, admitted int) {
				for _, m := range ms {
					m.trust.mu.Lock()
					if _, ok := m.trust.failedAt[r.name]; ok {
						failed++
					} else if _, ok := m.trust.verified[r.name]; ok {
						admitted++
					}
					m.trust.mu.Unlock()
				}
				return failed, admitted
			}
			if !waitFor(t, "verification", 60*time.Second, func() bool { f, a := tried(); return f+a == len(ms) }) {
				f, a := tried()
				t.Fatalf("only %d members tried the rogue (%d refused it, %d admitted it)", f+a, f, a)
			}
			if _, a := tried(); a > 0 {
				t.Errorf("%d members admitted the rogue", a)
			}
			t.Logf("every member tried the rogue's proof within %v", time.Since(t0).Round(time.Millisecond))
			time.Sleep(3 * time.Second) // the window of the old attack, not synchronisation
			load.finish(t, ms)
			if n := r.olric.Load(); n > 0 {
				t.Errorf("members connected %d times to the rogue's Olric port (passwords received: %d)", n, len(r.passwords()))
			}
			for _, m := range ms {
				members, err := m.node.client.Members(context.Background())
				if err != nil || len(members) != 3 {
					t.Errorf("%s sees %d members (%v), want 3", m.Name(), len(members), err)
				}
				for _, o := range m.routing.current().owners {
					if o == r.name {
						t.Errorf("%s routes a partition to the rogue", m.Name())
						break
					}
				}
				if c := coordinator(m); c != oldest {
					t.Errorf("%s: coordinator %s, want %s", m.Name(), c, oldest)
				}
			}
			t.Logf("rogue's owner channel tried %d times, its Olric port %d times", r.channel.Load(), r.olric.Load())
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestRogueControl runs the rogue of TestRogueMember against an open
// member (no certificate required; the rogue answers the identity question
// as a member would): it is admitted, its Olric port is dialled and its
// oldest Birthdate makes it the coordinator. The attack code can do what
// TestRogueMember shows it cannot.
func TestRogueControl(t *testing.T) {
	ms := startCluster(t, 1, nil)
	r := startRogue(t, []string{memberlistAddr(ms[0].cfg)}, nil, 1, nil, "")
	if !waitFor(t, "dial", 30*time.Second, func() bool { return r.olric.Load() > 0 }) {
		t.Fatal("the open member never dialled the rogue's Olric port")
	}
	members, err := ms[0].node.client.Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mb := range members {
		if mb.Name == r.name {
			found = true
			if !mb.Coordinator {
				t.Error("the rogue with the oldest Birthdate is not the coordinator")
			}
		}
	}
	if !found {
		t.Errorf("the rogue is not among the open member's members %v", members)
	}
}

// TestHalfSecured starts, beside a secured cluster, members that lack one
// of its securities (or have one it lacks): each is refused at once with
// ErrJoin and ErrSecurityMismatch naming the setting, instead of joining
// gossip and then timing out on the owner channel or Olric's port.
func TestHalfSecured(t *testing.T) {
	s := newSecrets(t)
	secured := startCluster(t, 2, s.secure(t))
	open := startCluster(t, 1, func(c *Config) { c.GossipKeys = [][]byte{s.gossip} })
	for _, tc := range []struct {
		name  string
		seed  *Member
		tweak func(*Config)
		want  string
	}{
		{"no channel TLS", secured[0], func(c *Config) { s.secure(t)(c); c.TLS = nil }, "missing: TLS"},
		{"no password", secured[0], func(c *Config) { s.secure(t)(c); c.Password = "" }, "missing: Password"},
		{"another password", secured[0], func(c *Config) { s.secure(t)(c); c.Password = newSecrets(t).password }, "Password differs"},
		{"no gossip key", secured[0], func(c *Config) { s.secure(t)(c); c.GossipKeys = nil }, "missing: GossipKeys"},
		{"another gossip key", secured[0], func(c *Config) { s.secure(t)(c); c.GossipKeys = [][]byte{randomKey(t, 32)} }, "GossipKeys differ"},
		{"TLS where the cluster has none", open[0], func(c *Config) { s.secure(t)(c); c.Password = "" }, "has no TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig(t)
			tc.tweak(&c)
			c.Peers = []string{memberlistAddr(tc.seed.cfg)}
			start := time.Now()
			m, err := Start(context.Background(), c)
			if err == nil {
				shutdownAll(t, []*Member{m})
				t.Fatal("started")
			}
			t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
			if !errors.Is(err, ErrJoin) || !errors.Is(err, ErrSecurityMismatch) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrJoin and ErrSecurityMismatch saying %q", err, tc.want)
			}
		})
	}
	for _, m := range secured {
		if members, err := m.node.client.Members(context.Background()); err != nil || len(members) != 2 {
			t.Errorf("%s sees %d members (%v), want 2", m.Name(), len(members), err)
		}
	}
}

// TestStartFailureLeaksNothing fails Start in each way it can fail after
// Olric started (no peer answers, a peer refuses this member's security)
// and checks that no goroutine of the attempt outlives it. Before, Olric's
// balancer and routing-table goroutines stayed behind after ErrJoin.
func TestStartFailureLeaksNothing(t *testing.T) {
	s := newSecrets(t)
	nowhere := net.JoinHostPort("127.0.0.1", strconv.Itoa(freeBase(t)))
	for _, tc := range []struct {
		name  string
		peers func() []string
		tweak func(*Config)
	}{
		{"nobody answers", func() []string { return []string{nowhere} }, nil},
		// A node that says it has a password, which this member lacks (a
		// rogue, so that no other Olric member runs in the process).
		{"security refused", func() []string {
			r := startRogue(t, nil, [][]byte{s.gossip}, 1, nil, s.password)
			return []string{memberlistAddr(Config{BindAddr: "127.0.0.1", BindPort: r.port})}
		}, func(c *Config) { c.GossipKeys = [][]byte{s.gossip} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peers := tc.peers()
			before := goleak.IgnoreCurrent()
			c := testConfig(t)
			c.JoinTimeout = time.Second
			if tc.tweak != nil {
				tc.tweak(&c)
			}
			c.Peers = peers
			if m, err := Start(context.Background(), c); !errors.Is(err, ErrJoin) {
				if m != nil {
					shutdownAll(t, []*Member{m})
				}
				t.Fatalf("%v, want ErrJoin", err)
			}
			var err error
			waitFor(t, "goroutines", 10*time.Second, func() bool {
				err = goleak.Find(before, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
				return err == nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
}

// TestOlricTunnelled checks that with channel security on, Olric's own
// traffic between members travels through the owner channels' mutual TLS:
// every member serves tunnelled connections, and a key owned elsewhere is
// written and read through Olric's client.
func TestOlricTunnelled(t *testing.T) {
	s := newSecrets(t)
	ms := startCluster(t, 3, s.secure(t))
	ctx := context.Background()
	k := ownedKeys(ms[1], "tunnel-", 1)[0]
	dm, err := ms[0].node.client.NewDMap("tunnel")
	if err != nil {
		t.Fatal(err)
	}
	if err := dm.Put(ctx, k, "v"); err != nil {
		t.Fatal(err)
	}
	if gr, err := dm.Get(ctx, k); err != nil {
		t.Fatal(err)
	} else if v, _ := gr.String(); v != "v" {
		t.Fatalf("got %q", v)
	}
	for _, m := range ms {
		m.channel.mu.Lock()
		n := len(m.channel.conns.special)
		m.channel.mu.Unlock()
		if n == 0 {
			t.Errorf("%s serves no tunnelled connection", m.Name())
		}
	}
}

// TestProbeKeysWithoutKeys: a joiner without GossipKeys that gossip is
// slow to let in (a starved machine) is not refused for its keys when the
// member it probes has none either: without keys there is nothing to
// differ. Before, two probes a second apart refused it with "GossipKeys
// differ from the cluster's" (TestCrash, beside busy loops on one core).
// A mismatch where one side has keys is still refused (TestHalfSecured).
func TestProbeKeysWithoutKeys(t *testing.T) {
	seed := startCluster(t, 1, nil)[0]
	var g guard
	g.init(seed, seed.trust.creds)
	g.self = &trust.Record{} // its gossip started and has not been let in
	for range 3 {
		g.probeKeys(context.Background(), []string{memberlistAddr(seed.cfg)})
	}
	select {
	case <-g.refused:
		t.Fatalf("refused without keys on either side: %v", g.refusal)
	default:
	}
	if g.keyStrikes != 0 {
		t.Errorf("%d strikes against keys neither side has", g.keyStrikes)
	}
}
