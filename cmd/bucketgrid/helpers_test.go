package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bucketgrid/bucketgrid/internal/harness/child"
)

// need returns the value of the environment variable name, which a server
// started by scripts/servers.sh provides. Without it the test fails under
// CI and is skipped elsewhere.
func need(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set: run scripts/servers.sh start and source .servers/env", name)
		}
		t.Skipf("%s is not set (run scripts/servers.sh start and source .servers/env)", name)
	}
	return v
}

// freePorts returns n free TCP ports on the loopback interface.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// gridPort returns a port p with p, p+1 and p+2 free: a grid member's
// Olric, owner-channel and gossip ports (Olric cannot bind port 0).
func gridPort(t testing.TB) int {
	t.Helper()
	return commonGridPort(t, "127.0.0.1")
}

// commonGridPort returns a port p such that p, p+1 and p+2 (and p+2 for
// UDP, gossip's) were free a moment ago on every one of hosts. It picks
// below the kernel's ephemeral range: a port free a moment ago in that
// range may be handed to any process's outgoing connection, or to a
// listener on port 0, before the instance binds it (a loaded run of the
// whole suite saw instances exit with "address already in use").
func commonGridPort(t testing.TB, hosts ...string) int {
	t.Helper()
	lo, hi := 10000, ephemeralStart()-3
	for range 200 {
		p := lo + int(randUint16())%(hi-lo)
		ok := true
		var lns []io.Closer
		for _, h := range hosts {
			for i := range 3 {
				ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(p+i)))
				if err != nil {
					ok = false
					break
				}
				lns = append(lns, ln)
			}
			if !ok {
				break
			}
			pc, err := net.ListenPacket("udp", net.JoinHostPort(h, strconv.Itoa(p+2)))
			if err != nil {
				ok = false
				break
			}
			lns = append(lns, pc)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatal("no three consecutive free ports")
	return 0
}

// ephemeralStart is the first port of the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), 32768 where it cannot be read or leaves
// too little room below it.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 20000 {
		return 32768
	}
	return n
}

func randUint16() uint16 {
	var b [2]byte
	rand.Read(b[:])
	return uint16(b[0])<<8 | uint16(b[1])
}

// randBytes returns n random bytes.
func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// writeConfig writes files (name → YAML) into a new directory and returns it.
func writeConfig(t testing.TB, dir string, files map[string]string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// instance is a bucketgrid service run in this process by run(), as main
// runs it.
type instance struct {
	grpcAddr, httpAddr string
	ready              string // the ready line
	rlqsAddr           string // with -rlqs
	cancel             context.CancelFunc
	done               chan error
}

// startInstance runs bucketgrid with args (flag syntax) until the test ends.
func startInstance(t testing.TB, args ...string) *instance {
	t.Helper()
	// No drain at shutdown unless the test asks for one (a later flag wins).
	args = append([]string{"-drain-grace", "0"}, args...)
	fs := flag.NewFlagSet("bucketgrid", flag.ContinueOnError)
	cfg, err := parseFlags(fs, args)
	if err != nil {
		t.Fatalf("flags %q: %v", args, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	in := &instance{cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := run(ctx, cfg, pw, testWriter{t})
		pw.CloseWithError(fmt.Errorf("bucketgrid exited: %v", err))
		in.done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("bucketgrid did not start: %v", err)
	}
	go io.Copy(io.Discard, pr)
	in.grpcAddr, in.httpAddr, in.rlqsAddr, in.ready = field(line, "grpc="), field(line, "http="), field(line, "rlqs="), line
	t.Cleanup(func() {
		cancel()
		if err := <-in.done; err != nil {
			t.Errorf("bucketgrid: %v", err)
		}
	})
	return in
}

// field returns the value of "name=value" in a ready line.
func field(line, name string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, name); ok {
			return v
		}
	}
	return ""
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

// client dials a gRPC address without TLS.
func client(t testing.TB, addr string) rlspb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// peer is envoyproxy/ratelimit, the reference service, run as a process on
// the Redis of scripts/servers.sh.
type peer struct {
	grpcAddr, httpAddr string
	pid                int
}

// startPeer runs envoyproxy/ratelimit on the configuration files until the
// test ends. Its keys get a prefix of their own, so runs never share
// counters.
func startPeer(t testing.TB, files map[string]string) *peer {
	t.Helper()
	return startPeerPrefix(t, files, "bgtest_"+randHex(6)+"_")
}

// startPeerPrefix is startPeer with the key prefix given: instances with the
// same prefix and Redis share their counters.
func startPeerPrefix(t testing.TB, files map[string]string, prefix string) *peer {
	t.Helper()
	bin := need(t, "ENVOY_RATELIMIT_BIN")
	redis := need(t, "REDIS_ADDR")
	root := t.TempDir()
	writeConfig(t, filepath.Join(root, "ratelimit", "config"), files)
	ports := freePorts(t, 3)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		fmt.Sprintf("PORT=%d", ports[0]), fmt.Sprintf("GRPC_PORT=%d", ports[1]), fmt.Sprintf("DEBUG_PORT=%d", ports[2]),
		"CACHE_KEY_PREFIX="+prefix)
	c := child.Start(t, cmd)
	p := &peer{grpcAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]), httpAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		pid: c.Pid()}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-c.Exited():
			t.Fatalf("envoyproxy/ratelimit exited at start:\n%s", c.Out.String())
		default:
		}
		resp, err := http.Get("http://" + p.httpAddr + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoyproxy/ratelimit not healthy after 60s:\n%s", c.Out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// req builds a request of one descriptor per key/value pair.
func req(domain string, kv ...string) *rlspb.RateLimitRequest {
	r := &rlspb.RateLimitRequest{Domain: domain}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptors = append(r.Descriptors, entries(kv[i], kv[i+1]))
	}
	return r
}
