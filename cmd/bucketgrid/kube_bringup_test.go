//go:build linux && !race

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/miekg/dns"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bucketgrid/bucketgrid/internal/netbed"
)

const (
	readmePath     = "../../deploy/kubernetes/README.md"
	dockerfilePath = "../../deploy/kubernetes/Dockerfile"
	kubeNamespace  = "shop"
)

// TestKubernetesBringUp brings deploy/kubernetes up as a user would, with
// no cluster: the README's commands that make the Secret run exactly as
// written (their kubectl is the test's, keeping what it is given as the
// Secret), and each replica of the StatefulSet runs as its container
// would — the image's entrypoint with the container's args and env, the
// Secret and ConfigMap files at their mount paths (laid out as the kubelet
// lays them out, moved under a directory of the pod's own), as the
// container's user — on a host of its own (internal/netbed), started in
// order, each once the one before is ready, with its probes polled as the
// kubelet polls them. The test's DNS server answers the cluster's names
// (the headless Service lists every started pod; the Service names a
// cluster IP, which a proxy of the test's, as kube-proxy, forwards to
// ready pods). Then a rolling restart, one replica at a time as the
// StatefulSet and the PodDisruptionBudget allow, and checks through the
// Service's name: the limit holds before and after.
func TestKubernetesBringUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts, probes and restarts three instances on a test bed (a minute or two): not with -short")
	}
	m := readManifests(t)
	secrets := readmeSecrets(t)
	entry := dockerEntrypoint(t)
	bin := binary(t)
	replicas := int(*m.set.Spec.Replicas)
	bed := netbed.New(t, replicas+1)
	cluster := bed.Hosts[replicas] // the cluster's DNS, the Service's cluster IP and the test's client
	c := newKubeCluster(t, bed, m, secrets, entry, bin)

	// The cluster's DNS server, and every pod's resolv.conf naming it as
	// the kubelet writes it (ClusterFirst).
	pc, err := cluster.ListenPacket("udp", cluster.Addr+":53")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: c.dns}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	for _, h := range bed.Hosts[:replicas] {
		dir := filepath.Join("/etc/netns", h.NS) // ip netns exec mounts its files over /etc
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		resolv := fmt.Sprintf("search %[1]s.svc.cluster.local svc.cluster.local cluster.local\nnameserver %[2]s\noptions ndots:5\n", kubeNamespace, cluster.Addr)
		if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(resolv), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.serve(cluster)

	// OrderedReady: each pod once the one before is running and ready.
	begin := time.Now()
	for i := range replicas {
		c.start(i)
		c.waitReady(i, 3*time.Minute)
		t.Logf("%s ready %v after the start", c.pods[i].name, time.Since(begin).Round(time.Millisecond))
	}

	svc := c.serviceClient(cluster)
	checkLimit(t, svc, "before the restart")

	// A rolling restart: from the highest ordinal down, each pod deleted
	// only when every pod is ready (maxUnavailable), its replacement
	// waited for before the next. A client keeps calling the Service
	// throughout.
	ctx, stopCalls := context.WithCancel(context.Background())
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	callsDone := make(chan struct{})
	go func() {
		defer close(callsDone)
		for n := 0; ctx.Err() == nil; n++ {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := svc.ShouldRateLimit(cctx, shopRequest(fmt.Sprintf("rolling-%d", n%50)))
			cancel()
			if ctx.Err() != nil {
				return
			}
			calls.Add(1)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
			time.Sleep(20 * time.Millisecond) // pacing the client, not synchronisation
		}
	}()
	rolling := time.Now()
	for i := replicas - 1; i >= 0; i-- {
		c.requireAllReady()
		c.terminate(i)
		c.start(i)
		c.waitReady(i, 3*time.Minute)
		t.Logf("%s replaced and ready %v into the rolling restart", c.pods[i].name, time.Since(rolling).Round(time.Millisecond))
	}
	stopCalls()
	<-callsDone
	t.Logf("during the rolling restart (%v): %d calls through the Service, %d failed (first: %v)",
		time.Since(rolling).Round(time.Millisecond), calls.Load(), failed.Load(), firstErr.Load())
	if calls.Load() == 0 {
		t.Error("no call through the Service completed during the rolling restart")
	}
	if v := c.violations(); len(v) > 0 {
		t.Errorf("the PodDisruptionBudget was not kept: %v", v)
	}
	checkLimit(t, svc, "after the restart")
}

// readmeSecrets runs the README's shell blocks that create Secrets, as
// written, with a kubectl of the test's that keeps each Secret's files;
// it returns the Secrets by name, each key's bytes.
func readmeSecrets(t *testing.T) map[string]map[string][]byte {
	t.Helper()
	doc, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	blocks := shellBlocks(string(doc))
	var run []string
	for _, b := range blocks {
		if strings.Contains(b, "kubectl create secret") {
			run = append(run, b)
		}
	}
	if len(run) == 0 {
		t.Fatalf("%s: no shell block creates a Secret (kubectl create secret) among %d blocks", readmePath, len(blocks))
	}
	dir := t.TempDir()
	store, bin, work := filepath.Join(dir, "store"), filepath.Join(dir, "bin"), filepath.Join(dir, "work")
	for _, d := range []string{store, bin, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(kubectlShim), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, b := range run {
		cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", b)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBE_STORE="+store)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the README's commands:\n%s\nfailed: %v\n%s", b, err, out)
		}
	}
	secrets := map[string]map[string][]byte{}
	names, _ := os.ReadDir(store)
	for _, n := range names {
		keys, err := os.ReadDir(filepath.Join(store, n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		secrets[n.Name()] = map[string][]byte{}
		for _, k := range keys {
			b, err := os.ReadFile(filepath.Join(store, n.Name(), k.Name()))
			if err != nil {
				t.Fatal(err)
			}
			secrets[n.Name()][k.Name()] = b
		}
	}
	left, _ := os.ReadDir(work)
	for _, f := range left {
		t.Errorf("the README's commands leave %s behind in the working directory", f.Name())
	}
	return secrets
}

// kubectlShim is the kubectl the README's commands run: `create secret
// generic NAME --from-file=[KEY=]PATH...` keeps the files under
// $KUBE_STORE/NAME, as the API server would keep the Secret; anything
// else fails, so a command the test does not emulate is never passed over.
const kubectlShim = `#!/bin/bash
set -e
if [ "$1 $2 $3" != "create secret generic" ] || [ -z "$4" ]; then
	echo "kubectl (the test's): only 'create secret generic NAME --from-file=...' is emulated, not: $*" >&2
	exit 1
fi
dir="$KUBE_STORE/$4"
if [ -e "$dir" ]; then echo "Error from server (AlreadyExists): secrets \"$4\" already exists" >&2; exit 1; fi
mkdir -p "$dir"
shift 4
for a in "$@"; do
	case "$a" in
	--from-file=*=*) f=${a#--from-file=}; cp "${f#*=}" "$dir/${f%%=*}";;
	--from-file=*) f=${a#--from-file=}; cp "$f" "$dir/$(basename "$f")";;
	*) echo "kubectl (the test's): unsupported argument $a" >&2; exit 1;;
	esac
done
echo "secret/${dir##*/} created"
`

// shellBlocks returns the contents of a Markdown document's fenced code
// blocks marked sh, bash or shell.
func shellBlocks(doc string) []string {
	var blocks []string
	var cur *strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			if lang := strings.TrimPrefix(trimmed, "```"); lang == "sh" || lang == "bash" || lang == "shell" {
				cur = &strings.Builder{}
			} else if lang != "" {
				cur = &strings.Builder{} // another language: collected and dropped
				cur.WriteString("\x00")
			}
		case cur != nil && trimmed == "```":
			if s := cur.String(); !strings.HasPrefix(s, "\x00") {
				blocks = append(blocks, s)
			}
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return blocks
}

// dockerEntrypoint returns the exec-form ENTRYPOINT of the image's
// Dockerfile: what a container without a command runs.
func dockerEntrypoint(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	var entry []string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ENTRYPOINT "); ok {
			entry = nil
			if err := json.Unmarshal([]byte(rest), &entry); err != nil {
				t.Fatalf("%s: ENTRYPOINT %s: want the exec form: %v", dockerfilePath, rest, err)
			}
		}
	}
	if len(entry) == 0 {
		t.Fatalf("%s: no ENTRYPOINT", dockerfilePath)
	}
	return entry
}

// kubeCluster is what the test stands in for: the kubelets, the
// StatefulSet controller, the endpoints controller, CoreDNS and kube-proxy.
type kubeCluster struct {
	t       *testing.T
	bed     *netbed.Bed
	m       manifests
	secrets map[string]map[string][]byte
	entry   []string
	bin     string
	dns     *dnsServer
	pods    []*kubePod

	mu        sync.Mutex
	clusterIP string
	next      int      // round robin of the Service's proxy
	breaches  []string // moments the PodDisruptionBudget was not kept
}

// kubePod is one replica: its host keeps its address across restarts.
type kubePod struct {
	name    string
	host    *netbed.Host
	proc    *netbed.Proc
	out     *syncBuffer
	ready   atomic.Bool
	running atomic.Bool // a container runs (or is shutting down)
	// gone is set once the pod is being deleted (out of the endpoints).
	gone atomic.Bool
	stop context.CancelFunc // its probes
	fail chan string        // what the kubelet would act on: an exit, a failed probe
}

func newKubeCluster(t *testing.T, bed *netbed.Bed, m manifests, secrets map[string]map[string][]byte, entry []string, bin string) *kubeCluster {
	c := &kubeCluster{t: t, bed: bed, m: m, secrets: secrets, entry: entry, bin: bin, dns: &dnsServer{records: map[string][]string{}}}
	for i := range int(*m.set.Spec.Replicas) {
		c.pods = append(c.pods, &kubePod{name: fmt.Sprintf("%s-%d", m.set.Name, i), host: bed.Hosts[i]})
	}
	// The container's user must reach the binary.
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *kubeCluster) container() corev1.Container { return c.m.set.Spec.Template.Spec.Containers[0] }

// headless is the StatefulSet's Service.
func (c *kubeCluster) headless() *corev1.Service { return c.m.services[c.m.set.Spec.ServiceName] }

// service is the other Service, the clients'.
func (c *kubeCluster) service() *corev1.Service {
	for name, s := range c.m.services {
		if name != c.m.set.Spec.ServiceName {
			return s
		}
	}
	c.t.Fatal("no Service besides the headless one")
	return nil
}

func fqdn(name string) string { return name + "." + kubeNamespace + ".svc.cluster.local" }

// publish sets the DNS records from the pods' state: the headless
// Service lists every pod that runs (publishNotReadyAddresses) and names
// each by its own name; the clients' Service names its cluster IP.
func (c *kubeCluster) publish() {
	hl := c.headless()
	var addrs []string
	for _, p := range c.pods {
		name := fqdn(p.name + "." + hl.Name)
		if p.running.Load() && !p.gone.Load() && (hl.Spec.PublishNotReadyAddresses || p.ready.Load()) {
			addrs = append(addrs, p.host.Addr)
			c.dns.set(name, p.host.Addr)
		} else {
			c.dns.set(name)
		}
	}
	c.dns.set(fqdn(hl.Name), addrs...)
	c.dns.set(fqdn(c.service().Name), c.clusterIP)
}

// serve gives the clients' Service its cluster IP on host: a proxy per
// port, as kube-proxy, to the targetPort of a ready pod.
func (c *kubeCluster) serve(host *netbed.Host) {
	c.clusterIP = host.Addr
	s := c.service()
	for _, sp := range s.Spec.Ports {
		if orTCP(sp.Protocol) != corev1.ProtocolTCP {
			continue
		}
		target := c.targetPort(sp.TargetPort)
		ln, err := host.Listen("tcp", net.JoinHostPort(c.clusterIP, strconv.Itoa(int(sp.Port))))
		if err != nil {
			c.t.Fatal(err)
		}
		var conns sync.WaitGroup
		c.t.Cleanup(func() { ln.Close(); conns.Wait() })
		go func() {
			for {
				in, err := ln.Accept()
				if err != nil {
					return
				}
				conns.Add(1)
				go func() {
					defer conns.Done()
					defer in.Close()
					p := c.endpoint()
					if p == nil {
						return // no ready endpoint: refused
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					out, err := host.Dial(ctx, "tcp", net.JoinHostPort(p.host.Addr, strconv.Itoa(int(target))))
					cancel()
					if err != nil {
						return
					}
					defer out.Close()
					done := make(chan struct{})
					go func() { io.Copy(out, in); out.(*net.TCPConn).CloseWrite(); close(done) }()
					io.Copy(in, out)
					in.(*net.TCPConn).CloseWrite()
					<-done
				}()
			}
		}()
	}
	c.publish()
}

// endpoint picks a ready pod, round robin, or nil.
func (c *kubeCluster) endpoint() *kubePod {
	c.mu.Lock()
	defer c.mu.Unlock()
	for range c.pods {
		c.next = (c.next + 1) % len(c.pods)
		if p := c.pods[c.next]; p.ready.Load() && !p.gone.Load() {
			return p
		}
	}
	return nil
}

// targetPort resolves a Service's targetPort against the container's ports.
func (c *kubeCluster) targetPort(p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.container().Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	c.t.Fatalf("no container port named %q", p.StrVal)
	return 0
}

// start creates pod i: its volumes, its process, its probes.
func (c *kubeCluster) start(i int) {
	t := c.t
	t.Helper()
	p := c.pods[i]
	spec := c.m.set.Spec.Template.Spec
	ctr := c.container()
	root := filepath.Join(t.TempDir(), p.name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(root), filepath.Dir(filepath.Dir(root))} {
		if err := os.Chmod(d, 0o755); err != nil { // the container's user walks to its volumes
			t.Fatal(err)
		}
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	for _, vm := range ctr.VolumeMounts {
		c.writeVolume(filepath.Join(root, vm.MountPath), volumes[vm.Name], spec.SecurityContext)
	}

	// The environment and $(VAR) in args, as the kubelet expands them.
	env := map[string]string{"HOSTNAME": p.name, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expandKube(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			v, ok := map[string]string{"status.podIP": p.host.Addr, "metadata.namespace": kubeNamespace, "metadata.name": p.name}[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Fatalf("env %s: field %s is not emulated", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = v
		default:
			t.Fatalf("env %s: only values and fields of the pod are emulated", e.Name)
		}
	}
	argv := slices.Clone(c.entry)
	if len(ctr.Command) > 0 {
		argv = slices.Clone(ctr.Command)
	}
	if argv[0] != "/bucketgrid" {
		t.Fatalf("the container runs %s; the test runs the binary the Dockerfile puts at /bucketgrid", argv[0])
	}
	argv[0] = c.bin
	for _, a := range ctr.Args {
		argv = append(argv, remapMounts(expandKube(a, env), root, ctr.VolumeMounts))
	}

	// As the container's user, on the pod's host.
	sc := spec.SecurityContext
	uid, gid := ptrOr(sc.RunAsUser), ptrOr(sc.RunAsGroup)
	if ctr.SecurityContext != nil && ctr.SecurityContext.RunAsUser != nil {
		uid = *ctr.SecurityContext.RunAsUser
	}
	groups := fmt.Sprint(ptrOr(sc.FSGroup))
	cmd := p.host.Command("setpriv", append([]string{"--reuid", fmt.Sprint(uid), "--regid", fmt.Sprint(gid), "--groups", groups, "--inh-caps=-all", "--"}, argv...)...)
	cmd.Dir = root
	cmd.Env = nil
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	p.out = &syncBuffer{}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	p.ready.Store(false)
	p.gone.Store(false)
	fail := make(chan string, 8)
	p.fail = fail
	proc := c.bed.Start(cmd)
	p.proc = proc
	p.running.Store(true)
	c.publish()
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	go func() {
		select {
		case <-proc.Done():
			if ctx.Err() == nil && !p.gone.Load() {
				p.ready.Store(false)
				fail <- fmt.Sprintf("the container exited (%v)", proc.Wait())
			}
		case <-ctx.Done():
		}
	}()
	go c.probe(ctx, p, fail)
}

// writeVolume writes a Secret or ConfigMap volume at dir as the kubelet
// does: the keys in a timestamped directory that ..data links to, each
// key a link through ..data, with the volume's mode and the pod's
// fsGroup (the kubelet adds group read to a read-only volume's files).
func (c *kubeCluster) writeVolume(dir string, v corev1.Volume, sc *corev1.PodSecurityContext) {
	t := c.t
	var data map[string][]byte
	var mode int32 = 0o644
	switch {
	case v.Secret != nil:
		s, ok := c.secrets[v.Secret.SecretName]
		if !ok {
			t.Fatalf("volume %s: Secret %s does not exist (the README's commands made %v)", v.Name, v.Secret.SecretName, slices.Sorted(maps.Keys(c.secrets)))
		}
		data = s
		if v.Secret.DefaultMode != nil {
			mode = *v.Secret.DefaultMode
		}
	case v.ConfigMap != nil:
		if v.ConfigMap.Name != c.m.rules.Name {
			t.Fatalf("volume %s: ConfigMap %s is not in the manifests", v.Name, v.ConfigMap.Name)
		}
		data = map[string][]byte{}
		for k, s := range c.m.rules.Data {
			data[k] = []byte(s)
		}
		if v.ConfigMap.DefaultMode != nil {
			mode = *v.ConfigMap.DefaultMode
		}
	default:
		t.Fatalf("volume %s: only Secret and ConfigMap volumes are emulated", v.Name)
	}
	stamp := "..2026_01_01_00_00_00.000000001"
	if err := os.MkdirAll(filepath.Join(dir, stamp), 0o755); err != nil {
		t.Fatal(err)
	}
	gid := -1
	if sc != nil && sc.FSGroup != nil {
		gid = int(*sc.FSGroup)
		mode |= 0o440
	}
	for k, b := range data {
		f := filepath.Join(dir, stamp, k)
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(f, 0, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(stamp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

var kubeVar = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandKube expands $(VAR) as the kubelet does: a defined variable is
// replaced, an undefined one stays as written, $$ is $.
func expandKube(s string, env map[string]string) string {
	return kubeVar.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// remapMounts moves a path argument (-flag=PATH or PATH) that lies on a
// volume mount under root, where the test wrote the volume.
func remapMounts(arg, root string, mounts []corev1.VolumeMount) string {
	prefix, val := "", arg
	if strings.HasPrefix(arg, "-") {
		if i := strings.IndexByte(arg, '='); i >= 0 {
			prefix, val = arg[:i+1], arg[i+1:]
		}
	}
	for _, vm := range mounts {
		if val == vm.MountPath || strings.HasPrefix(val, vm.MountPath+"/") {
			return prefix + filepath.Join(root, val)
		}
	}
	return arg
}

// probe polls the pod's probes as the kubelet does: the startup probe
// every period until it succeeds (failureThreshold failures in a row
// restart the container: here, fail the test), then readiness and
// liveness each at its own period.
func (c *kubeCluster) probe(ctx context.Context, p *kubePod, fail chan<- string) {
	ctr := c.container()
	run := func(pr *corev1.Probe, onResult func(ok bool, err error) bool) {
		period := time.Duration(max(pr.PeriodSeconds, 1)) * time.Second
		if pr.InitialDelaySeconds > 0 {
			select {
			case <-time.After(time.Duration(pr.InitialDelaySeconds) * time.Second):
			case <-ctx.Done():
				return
			}
		}
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			err := c.probeOnce(ctx, p, pr)
			if ctx.Err() != nil || !onResult(err == nil, err) {
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}
	threshold := func(pr *corev1.Probe) int32 { return max(pr.FailureThreshold, 1) }
	if pr := ctr.StartupProbe; pr != nil {
		var fails int32
		succeeded := false
		run(pr, func(ok bool, err error) bool {
			if ok {
				succeeded = true
				return false
			}
			if fails++; fails >= threshold(pr) {
				fail <- fmt.Sprintf("startup probe failed %d times: %v", fails, err)
				return false
			}
			return true
		})
		if !succeeded {
			return
		}
	}
	if pr := ctr.LivenessProbe; pr != nil {
		go func() {
			var fails int32
			run(pr, func(ok bool, err error) bool {
				if ok {
					fails = 0
					return true
				}
				if fails++; fails >= threshold(pr) && !p.gone.Load() {
					fail <- fmt.Sprintf("liveness probe failed %d times: %v", fails, err)
					return false
				}
				return true
			})
		}()
	}
	if pr := ctr.ReadinessProbe; pr != nil {
		var fails int32
		run(pr, func(ok bool, err error) bool {
			if ok {
				fails = 0
				c.setReady(p, true)
			} else if fails++; fails >= threshold(pr) {
				c.setReady(p, false)
			}
			return true
		})
	} else {
		c.setReady(p, true)
	}
}

// setReady records a readiness change and whether the budget still holds.
func (c *kubeCluster) setReady(p *kubePod, ready bool) {
	if p.ready.Swap(ready) == ready {
		return
	}
	c.publish()
	maxUnavailable := c.m.pdb.Spec.MaxUnavailable.IntValue()
	down := 0
	for _, q := range c.pods {
		if !q.ready.Load() && q.running.Load() {
			down++
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if down > maxUnavailable {
		c.breaches = append(c.breaches, fmt.Sprintf("%d pods unready (maxUnavailable %d) when %s became ready=%v", down, maxUnavailable, p.name, ready))
	}
}

func (c *kubeCluster) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.breaches)
}

// probeOnce runs one probe against the pod's address, from its host (as
// the kubelet reaches the pod's IP), within the probe's timeout.
func (c *kubeCluster) probeOnce(ctx context.Context, p *kubePod, pr *corev1.Probe) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(max(pr.TimeoutSeconds, 1))*time.Second)
	defer cancel()
	dial := func(ctx context.Context, addr string) (net.Conn, error) { return p.host.Dial(ctx, "tcp", addr) }
	switch {
	case pr.HTTPGet != nil:
		addr := net.JoinHostPort(p.host.Addr, strconv.Itoa(int(c.targetPort(pr.HTTPGet.Port))))
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, a string) (net.Conn, error) { return dial(ctx, a) }}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+pr.HTTPGet.Path, nil)
		if err != nil {
			return err
		}
		r, err := hc.Do(req)
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode < 200 || r.StatusCode >= 400 {
			return fmt.Errorf("HTTP %d", r.StatusCode)
		}
		return nil
	case pr.GRPC != nil:
		addr := net.JoinHostPort(p.host.Addr, strconv.Itoa(int(pr.GRPC.Port)))
		conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecureCreds()), grpc.WithContextDialer(dial))
		if err != nil {
			return err
		}
		defer conn.Close()
		var service string
		if pr.GRPC.Service != nil {
			service = *pr.GRPC.Service
		}
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			return err
		}
		if h.Status != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("gRPC health %v", h.Status)
		}
		return nil
	}
	return errors.New("only httpGet and grpc probes are emulated")
}

// waitReady waits for pod i to be ready, failing the test with the
// container's output if it exits or a probe gives up first.
func (c *kubeCluster) waitReady(i int, within time.Duration) {
	c.t.Helper()
	p := c.pods[i]
	deadline := time.After(within)
	for !p.ready.Load() {
		select {
		case why := <-p.fail:
			c.t.Fatalf("%s: %s; its output:\n%s", p.name, why, p.out.tail(2000))
		case <-deadline:
			c.t.Fatalf("%s: not ready within %v; its output:\n%s", p.name, within, p.out.tail(2000))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// requireAllReady is the StatefulSet controller's and the budget's
// condition for deleting a pod: every pod running and ready.
func (c *kubeCluster) requireAllReady() {
	c.t.Helper()
	for _, p := range c.pods {
		select {
		case why := <-p.fail:
			c.t.Fatalf("%s: %s; its output:\n%s", p.name, why, p.out.tail(2000))
		default:
		}
		if !p.ready.Load() {
			c.t.Fatalf("%s is not ready: deleting another pod would breach the PodDisruptionBudget", p.name)
		}
	}
}

// terminate deletes pod i as the kubelet does: out of the endpoints,
// SIGTERM, and SIGKILL if it outlives terminationGracePeriodSeconds (a
// failure here: the shutdown is meant to fit).
func (c *kubeCluster) terminate(i int) {
	c.t.Helper()
	p := c.pods[i]
	p.gone.Store(true)
	c.publish()
	grace := time.Duration(ptrOr(c.m.set.Spec.Template.Spec.TerminationGracePeriodSeconds)) * time.Second
	begin := time.Now()
	if err := p.proc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		c.t.Fatalf("%s: SIGTERM: %v", p.name, err)
	}
	if !p.proc.WaitTimeout(context.Background(), grace) {
		p.proc.Kill()
		c.t.Errorf("%s outlived terminationGracePeriodSeconds (%v) and was killed; its output:\n%s", p.name, grace, p.out.tail(2000))
	}
	p.stop()
	if err := p.proc.Wait(); err != nil {
		c.t.Errorf("%s exited with %v after SIGTERM; its output:\n%s", p.name, err, p.out.tail(2000))
	}
	c.t.Logf("%s terminated in %v", p.name, time.Since(begin).Round(time.Millisecond))
	p.ready.Store(false)
	p.running.Store(false)
	c.publish()
}

// serviceClient dials the clients' Service by its DNS name, resolved by
// the cluster's DNS server, from host.
func (c *kubeCluster) serviceClient(host *netbed.Host) rlspb.RateLimitServiceClient {
	c.t.Helper()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return host.Dial(ctx, "udp", net.JoinHostPort(c.clusterIP, "53"))
	}}
	var port int32
	for _, sp := range c.service().Spec.Ports {
		if sp.Name == "grpc" {
			port = sp.Port
		}
	}
	name := fqdn(c.service().Name)
	conn, err := grpc.NewClient("passthrough:///"+net.JoinHostPort(name, strconv.Itoa(int(port))),
		grpc.WithTransportCredentials(insecureCreds()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			h, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			ips, err := r.LookupHost(ctx, h)
			if err != nil {
				return nil, err
			}
			return host.Dial(ctx, "tcp", net.JoinHostPort(ips[0], p))
		}))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

func shopRequest(addr string) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*corepb.RateLimitDescriptor{
		{Entries: []*corepb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: addr}}},
	}}
}

// checkLimit sends the ConfigMap's per-address limit (60 a minute) and one
// more for a fresh address through the Service: 60 OK, then OVER_LIMIT.
// A minute boundary between the calls starts a new window; then it tries
// again with another address.
func checkLimit(t *testing.T, svc rlspb.RateLimitServiceClient, when string) {
	t.Helper()
	var got []rlspb.RateLimitResponse_Code
	for try := range 3 {
		addr := fmt.Sprintf("198.51.100.%d-%s-%d", try, strings.ReplaceAll(when, " ", "-"), time.Now().UnixNano())
		window := time.Now().Truncate(time.Minute)
		got = got[:0]
		for range 61 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			r, err := svc.ShouldRateLimit(ctx, shopRequest(addr))
			cancel()
			if err != nil {
				t.Fatalf("%s: a check through the Service: %v", when, err)
			}
			got = append(got, r.OverallCode)
		}
		if !time.Now().Truncate(time.Minute).Equal(window) {
			continue // the window turned during the calls
		}
		ok := 0
		for _, code := range got[:60] {
			if code == rlspb.RateLimitResponse_OK {
				ok++
			}
		}
		if ok != 60 || got[60] != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%s: 61 checks of one address through the Service: %d of the first 60 OK, then %v; want 60 OK, then OVER_LIMIT", when, ok, got[60])
		}
		return
	}
	t.Fatalf("%s: every try crossed a minute boundary", when)
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
