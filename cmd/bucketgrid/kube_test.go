package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
	yamlv2 "gopkg.in/yaml.v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/loader"
)

const manifestPath = "../../deploy/kubernetes/bucketgrid.yaml"

// manifests are the objects of deploy/kubernetes/bucketgrid.yaml, each
// decoded strictly (an unknown or misspelt field fails) into its
// Kubernetes API type.
type manifests struct {
	rules    *corev1.ConfigMap
	services map[string]*corev1.Service
	set      *appsv1.StatefulSet
	pdb      *policyv1.PodDisruptionBudget
	policy   *networkingv1.NetworkPolicy
}

func readManifests(t *testing.T) manifests {
	t.Helper()
	b, err := os.ReadFile(manifestPath)
	if err != nil {
		if os.IsNotExist(err) && os.Getenv("CI") == "" {
			t.Skipf("%s: not a checkout of the repository", manifestPath)
		}
		t.Fatal(err)
	}
	m := manifests{services: map[string]*corev1.Service{}}
	for i, doc := range bytes.Split(b, []byte("\n---\n")) {
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var obj any
		switch head.APIVersion + " " + head.Kind {
		case "v1 ConfigMap":
			m.rules = &corev1.ConfigMap{}
			obj = m.rules
		case "v1 Service":
			s := &corev1.Service{}
			defer func() { m.services[s.Name] = s }()
			obj = s
		case "apps/v1 StatefulSet":
			m.set = &appsv1.StatefulSet{}
			obj = m.set
		case "networking.k8s.io/v1 NetworkPolicy":
			m.policy = &networkingv1.NetworkPolicy{}
			obj = m.policy
		case "policy/v1 PodDisruptionBudget":
			m.pdb = &policyv1.PodDisruptionBudget{}
			obj = m.pdb
		default:
			t.Fatalf("document %d: unexpected %s %s", i, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("document %d (%s): %v", i, head.Kind, err)
		}
	}
	return m
}

// TestKubernetesManifests: the manifests run the binary as it is. Their
// arguments parse with its flags; container ports, Services and probes
// name the ports those flags open and the health endpoints it serves;
// secrets are files on a Secret volume; the rules load; the grace period
// outlasts the whole shutdown; DNS discovery names the headless Service.
func TestKubernetesManifests(t *testing.T) {
	m := readManifests(t)
	if m.rules == nil || m.set == nil || m.pdb == nil || m.policy == nil || len(m.services) != 2 {
		t.Fatalf("want a ConfigMap, two Services, a StatefulSet, a NetworkPolicy and a PodDisruptionBudget")
	}
	pod := m.set.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	// The arguments, with the variables Kubernetes substitutes.
	vars := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			t.Errorf("env %s: want a field of the pod", e.Name)
			continue
		}
		vars[e.Name] = map[string]string{"status.podIP": "10.1.2.3", "metadata.namespace": "shop"}[e.ValueFrom.FieldRef.FieldPath]
	}
	var args []string
	for _, a := range c.Args {
		for k, v := range vars {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		if strings.Contains(a, "$(") {
			t.Errorf("argument %q names a variable the container does not define", a)
		}
		args = append(args, a)
	}
	fs := flag.NewFlagSet("bucketgrid", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg, err := parseFlags(fs, args)
	if err != nil {
		t.Fatalf("the StatefulSet's arguments: %v", err)
	}
	if cfg.Backend != "grid" || cfg.Grid.Env != "lan" || cfg.Grid.Insecure {
		t.Errorf("backend %s, env %s, insecure %v: want a secured grid with lan timings", cfg.Backend, cfg.Grid.Env, cfg.Grid.Insecure)
	}
	if host, _, _ := splitHostPort(cfg.Grid.Bind); host != "10.1.2.3" {
		t.Errorf("-grid-bind %s: want the pod's address", cfg.Grid.Bind)
	}

	// Ports: the container's, by name, are the ones the flags open.
	port := func(addr string) int32 {
		_, p, err := splitHostPort(addr)
		if err != nil {
			t.Fatalf("%q: %v", addr, err)
		}
		return int32(p)
	}
	_, grid, _ := splitHostPort(cfg.Grid.Bind)
	want := map[string]corev1.ContainerPort{
		"grpc":       {ContainerPort: port(cfg.GRPCAddr), Protocol: corev1.ProtocolTCP},
		"http":       {ContainerPort: port(cfg.HTTPAddr), Protocol: corev1.ProtocolTCP},
		"olric":      {ContainerPort: int32(grid), Protocol: corev1.ProtocolTCP},
		"channel":    {ContainerPort: int32(grid + 1), Protocol: corev1.ProtocolTCP},
		"gossip":     {ContainerPort: int32(grid + 2), Protocol: corev1.ProtocolTCP},
		"gossip-udp": {ContainerPort: int32(grid + 2), Protocol: corev1.ProtocolUDP},
	}
	named := map[string]corev1.ContainerPort{}
	for _, p := range c.Ports {
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		named[p.Name] = p
		if w, ok := want[p.Name]; !ok || w.ContainerPort != p.ContainerPort || w.Protocol != p.Protocol {
			t.Errorf("container port %s: %d/%s, want %d/%s", p.Name, p.ContainerPort, p.Protocol, w.ContainerPort, w.Protocol)
		}
	}
	if len(named) != len(want) {
		t.Errorf("container ports %v, want %v", named, want)
	}
	resolve := func(what string, p intstr.IntOrString) int32 {
		if p.Type == intstr.String {
			cp, ok := named[p.StrVal]
			if !ok {
				t.Errorf("%s: no container port named %q", what, p.StrVal)
			}
			return cp.ContainerPort
		}
		return p.IntVal
	}

	// Services: the headless one carries the grid's ports and is the
	// StatefulSet's, and the name DNS discovery resolves.
	headless := m.services[m.set.Spec.ServiceName]
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Fatalf("the StatefulSet's service %q: want a headless Service that publishes pods before they are ready", m.set.Spec.ServiceName)
	}
	dnsName := headless.Name + ".shop.svc.cluster.local"
	if len(cfg.Grid.Peers) != 1 || cfg.Grid.Peers[0] != dnsPrefix+dnsName {
		t.Errorf("-grid-peers %v, want %s%s", cfg.Grid.Peers, dnsPrefix, dnsName)
	}
	for _, s := range m.services {
		for k, v := range s.Spec.Selector {
			if pod.Labels[k] != v {
				t.Errorf("service %s selects %s=%s, which the pods do not carry", s.Name, k, v)
			}
		}
		for _, p := range s.Spec.Ports {
			if got := resolve("service "+s.Name, p.TargetPort); got != p.Port || named[p.TargetPort.StrVal].Protocol != orTCP(p.Protocol) {
				t.Errorf("service %s port %s: %d/%s to %d/%s", s.Name, p.Name, p.Port, p.Protocol, got, named[p.TargetPort.StrVal].Protocol)
			}
		}
	}
	// Between members: the owner channel and gossip, never Olric's own
	// port (its only guard is a password; members reach it through the
	// owner channel).
	memberPorts := []string{"channel", "gossip", "gossip-udp"}
	var hp []string
	for _, p := range headless.Spec.Ports {
		hp = append(hp, p.TargetPort.StrVal)
	}
	if !slices.Equal(hp, memberPorts) {
		t.Errorf("headless service ports %v, want %v", hp, memberPorts)
	}
	checkNetworkPolicy(t, m, named, memberPorts)

	// Probes: on the health endpoints the binary serves.
	if c.ReadinessProbe == nil || c.ReadinessProbe.GRPC == nil || c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.StartupProbe == nil || c.StartupProbe.HTTPGet == nil {
		t.Fatal("want a gRPC readiness probe and HTTP liveness and startup probes")
	}
	ready := c.ReadinessProbe.GRPC
	if ready.Port != port(cfg.GRPCAddr) || ready.Service == nil || *ready.Service != rlspb.RateLimitService_ServiceDesc.ServiceName {
		t.Errorf("readiness probe: port %d service %v, want %d %s", ready.Port, ready.Service, port(cfg.GRPCAddr), rlspb.RateLimitService_ServiceDesc.ServiceName)
	}
	// Out of the endpoints within the drain: one failed probe suffices.
	if d := time.Duration(c.ReadinessProbe.PeriodSeconds*max(c.ReadinessProbe.FailureThreshold, 1)) * time.Second; d >= cfg.DrainGrace {
		t.Errorf("readiness takes %v to fail, not within -drain-grace %v", d, cfg.DrainGrace)
	}
	if join := time.Duration(c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold) * time.Second; join < cfg.Grid.JoinTimeout {
		t.Errorf("startup probe gives up after %v, before -grid-join-timeout %v", join, cfg.Grid.JoinTimeout)
	}
	for _, g := range []*corev1.HTTPGetAction{c.LivenessProbe.HTTPGet, c.StartupProbe.HTTPGet} {
		if resolve("probe", g.Port) != port(cfg.HTTPAddr) {
			t.Errorf("HTTP probe on port %v, want -http-addr's %d", g.Port, port(cfg.HTTPAddr))
		}
	}
	probeABinary(t, *ready.Service, c.LivenessProbe.HTTPGet.Path, c.StartupProbe.HTTPGet.Path)

	// Secrets and rules are files on the volumes they belong on.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	mountOf := func(path string) (corev1.VolumeMount, corev1.Volume) {
		for _, vm := range c.VolumeMounts {
			if strings.HasPrefix(path, vm.MountPath+"/") || path == vm.MountPath {
				return vm, volumes[vm.Name]
			}
		}
		t.Errorf("%s is on no volume", path)
		return corev1.VolumeMount{}, corev1.Volume{}
	}
	secrets := map[string]string{"-grid-secret-file": cfg.Grid.SecretFile, "-grid-gossip-key-file": cfg.Grid.GossipKeyFile, "-grid-password-file": cfg.Grid.PasswordFile}
	for f, path := range secrets {
		if path == "" {
			t.Errorf("%s is not set: a grid on the pod network needs all three secrets", f)
			continue
		}
		vm, v := mountOf(path)
		if v.Secret == nil || !vm.ReadOnly || v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o077 != 0 {
			t.Errorf("%s %s: want a read-only Secret volume only its owner reads", f, path)
		}
	}
	for _, path := range cfg.ConfigPaths {
		vm, v := mountOf(path)
		if v.ConfigMap == nil || v.ConfigMap.Name != m.rules.Name || !vm.ReadOnly || vm.MountPath != path {
			t.Errorf("-config %s: want the folder of ConfigMap %s, read-only", path, m.rules.Name)
		}
	}
	dir := t.TempDir()
	for name, data := range m.rules.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := (&loader.Loader{Paths: []string{dir}, Options: cfg.Rules}).Load(); err != nil {
		t.Errorf("the ConfigMap's rules: %v", err)
	}

	// Termination: longer than the drain, the requests in flight and
	// leaving the grid together.
	shutdown := cfg.DrainGrace + cfg.ShutdownGrace + backendCloseTimeout
	if tgp := m.set.Spec.Template.Spec.TerminationGracePeriodSeconds; tgp == nil || time.Duration(*tgp)*time.Second <= shutdown {
		t.Errorf("terminationGracePeriodSeconds %d: want more than the shutdown's %v", ptrOr(tgp), shutdown)
	}

	checkImage(t, pod.Spec)
	checkEnvoy(t, m, cfg)

	// One instance at a time, in order.
	if m.set.Spec.PodManagementPolicy != appsv1.OrderedReadyPodManagement {
		t.Errorf("podManagementPolicy %s, want OrderedReady: the first instance starts the grid alone", m.set.Spec.PodManagementPolicy)
	}
	if mu := m.pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", mu)
	}
	for k, v := range m.pdb.Spec.Selector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("PodDisruptionBudget selects %s=%s, which the pods do not carry", k, v)
		}
	}
}

// checkNetworkPolicy: the policy selects the pods and lets in the member
// ports from the pods only and the clients' Service's ports from anyone:
// nothing else (Olric's port is left to the pod itself).
func checkNetworkPolicy(t *testing.T, m manifests, named map[string]corev1.ContainerPort, memberPorts []string) {
	t.Helper()
	pod := m.set.Spec.Template
	np := m.policy.Spec
	for k, v := range np.PodSelector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("NetworkPolicy selects %s=%s, which the pods do not carry", k, v)
		}
	}
	if !slices.Equal(np.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Ingress) != 2 {
		t.Fatalf("NetworkPolicy: want Ingress with two rules (members, clients), have %v and %d rules", np.PolicyTypes, len(np.Ingress))
	}
	ports := func(rule networkingv1.NetworkPolicyIngressRule) []string {
		var names []string
		for _, p := range rule.Ports {
			if p.Port == nil {
				t.Errorf("NetworkPolicy: a rule opens every port")
				continue
			}
			cp, ok := named[p.Port.StrVal]
			if p.Port.Type != intstr.String || !ok || p.Protocol == nil || *p.Protocol != cp.Protocol {
				t.Errorf("NetworkPolicy port %v/%v: want a container port's name and its protocol", p.Port, p.Protocol)
				continue
			}
			names = append(names, p.Port.StrVal)
		}
		return names
	}
	members, clients := np.Ingress[0], np.Ingress[1]
	if got := ports(members); !slices.Equal(got, memberPorts) {
		t.Errorf("NetworkPolicy: members may reach %v, want %v", got, memberPorts)
	}
	if len(members.From) != 1 || members.From[0].PodSelector == nil || members.From[0].NamespaceSelector != nil || members.From[0].IPBlock != nil {
		t.Fatalf("NetworkPolicy: the member ports must be open to the pods only, not %v", members.From)
	}
	for k, v := range members.From[0].PodSelector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("NetworkPolicy: the member ports are open to %s=%s, which the pods do not carry", k, v)
		}
	}
	var want []string
	for name, s := range m.services {
		if name != m.set.Spec.ServiceName {
			for _, p := range s.Spec.Ports {
				want = append(want, p.TargetPort.StrVal)
			}
		}
	}
	if got := ports(clients); !slices.Equal(got, want) || len(clients.From) != 0 {
		t.Errorf("NetworkPolicy: clients may reach %v from %v, want the Service's %v from anyone", got, clients.From, want)
	}
}

func orTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// probeABinary asks a running instance what the probes ask: each HTTP
// path answers 200, the gRPC health of grpcService is SERVING.
func probeABinary(t *testing.T, grpcService string, paths ...string) {
	t.Helper()
	in, _ := memoryInstance(t)
	for _, p := range paths {
		r, err := http.Get("http://" + in.httpAddr + p)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Errorf("probe path %s: %d, want 200", p, r.StatusCode)
		}
	}
	conn, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: grpcService})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health of %q: %v %v, want SERVING", grpcService, h, err)
	}
}

func ptrOr(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// checkImage: the Dockerfile builds with go.work's Go and runs as the
// manifests' user on a distroless nonroot base; its context leaves out
// what the build does not need.
func checkImage(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	df, err := os.ReadFile("../../deploy/kubernetes/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	work, err := os.ReadFile("../../go.work")
	if err != nil {
		t.Fatal(err)
	}
	var goVersion string
	for _, line := range strings.Split(string(work), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			goVersion = strings.TrimSpace(v)
		}
	}
	var froms []string
	var user string
	for _, line := range strings.Split(string(df), "\n") {
		if f, ok := strings.CutPrefix(line, "FROM "); ok {
			froms = append(froms, strings.Fields(f)[0])
		}
		if u, ok := strings.CutPrefix(line, "USER "); ok {
			user = strings.TrimSpace(u)
		}
	}
	if len(froms) != 2 || !strings.HasPrefix(froms[0], "golang:"+goVersion+"-") {
		t.Errorf("Dockerfile FROM %v: want golang:%s-… (go.work's Go), then the runtime", froms, goVersion)
	}
	if len(froms) > 0 && !strings.HasPrefix(froms[len(froms)-1], "gcr.io/distroless/static-") || !strings.Contains(froms[len(froms)-1], ":nonroot") {
		t.Errorf("Dockerfile runtime %v: want distroless static, nonroot", froms)
	}
	sc := pod.SecurityContext
	if want := fmt.Sprintf("%d:%d", ptrOr(sc.RunAsUser), ptrOr(sc.RunAsGroup)); user != want {
		t.Errorf("Dockerfile USER %q, the manifests run as %s", user, want)
	}
	ignore, err := os.ReadFile("../../deploy/kubernetes/Dockerfile.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".git", "bin/", ".servers/"} {
		if !slices.Contains(strings.Split(string(ignore), "\n"), want) {
			t.Errorf("Dockerfile.dockerignore does not leave out %s", want)
		}
	}
}

// checkEnvoy: deploy/kubernetes/envoy.yaml is an Envoy v3 bootstrap whose
// rate-limit filter calls a cluster that is the clients' Service (its DNS
// name, its gRPC port, health-checked as the readiness probe checks), for
// the ConfigMap's domain, with a timeout above the service's own.
func checkEnvoy(t *testing.T, m manifests, cfg settings) {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/kubernetes/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yamlv2.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(jsonable(doc))
	if err != nil {
		t.Fatal(err)
	}
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		t.Fatalf("envoy.yaml: not an Envoy v3 bootstrap: %v", err)
	}
	if err := boot.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := boot.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var rl ratelimitv3.RateLimit
	if f := hcm.GetHttpFilters(); len(f) == 0 || f[0].GetTypedConfig().UnmarshalTo(&rl) != nil || rl.ValidateAll() != nil {
		t.Fatalf("envoy.yaml: want the rate-limit filter first: %v", f)
	}
	var domains []string
	for _, data := range m.rules.Data {
		var d struct{ Domain string }
		if err := yamlv2.Unmarshal([]byte(data), &d); err == nil {
			domains = append(domains, d.Domain)
		}
	}
	if !slices.Contains(domains, rl.GetDomain()) {
		t.Errorf("envoy.yaml: domain %q, the ConfigMap's are %v", rl.GetDomain(), domains)
	}
	if d := rl.GetTimeout().AsDuration(); d <= cfg.Timeout {
		t.Errorf("envoy.yaml: timeout %v, want above the service's -timeout %v so the service decides a slow check", d, cfg.Timeout)
	}
	name := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	var svc *corev1.Service
	for n, s := range m.services {
		if n != m.set.Spec.ServiceName {
			svc = s
		}
	}
	var grpcPort int32
	for _, p := range svc.Spec.Ports {
		if p.Name == "grpc" {
			grpcPort = p.Port
		}
	}
	found := false
	for _, c := range boot.GetStaticResources().GetClusters() {
		if c.GetName() != name {
			continue
		}
		found = true
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if host, ok := strings.CutSuffix(sa.GetAddress(), ".svc.cluster.local"); !ok || !strings.HasPrefix(host, svc.Name+".") || sa.GetPortValue() != uint32(grpcPort) {
			t.Errorf("envoy.yaml: cluster %s reaches %s:%d, want the Service %s.NAMESPACE.svc.cluster.local:%d", name, sa.GetAddress(), sa.GetPortValue(), svc.Name, grpcPort)
		}
		probe := m.set.Spec.Template.Spec.Containers[0].ReadinessProbe.GRPC.Service
		if hc := c.GetHealthChecks(); len(hc) != 1 || probe == nil || hc[0].GetGrpcHealthCheck().GetServiceName() != *probe {
			t.Errorf("envoy.yaml: cluster %s health checks %v, want gRPC health of %v as the readiness probe", name, hc, probe)
		}
		if c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] == nil {
			t.Errorf("envoy.yaml: cluster %s does not speak HTTP/2 (gRPC)", name)
		}
	}
	if !found {
		t.Errorf("envoy.yaml: the rate-limit filter calls cluster %q, which is not defined", name)
	}
}
