package wasmfilter_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rulesFile is a rule file in envoyproxy/ratelimit's format (JSON, which is
// YAML too): the filter reads it from its plugin configuration, and
// cmd/bucketgrid loads the same file with -config.
const rulesFile = "testdata/edge-rules.json"

// edgeLimits are the route's rate_limits, as Envoy's route configuration
// would state them: four descriptors per request at most.
const edgeLimits = `[
  {"actions": [{"remote_address": {}}]},
  {"actions": [{"request_headers": {"header_name": "X-Api-Key", "descriptor_key": "api_key"}}]},
  {"actions": [{"request_headers": {"header_name": "x-api-key", "descriptor_key": "api_key"}},
               {"request_headers": {"header_name": ":method", "descriptor_key": "method"}}]},
  {"actions": [{"generic_key": {"descriptor_value": "writes"}},
               {"header_value_match": {"descriptor_value": "api", "headers": [
                 {"name": ":path", "prefix_match": "/api/"}, {"name": ":method", "exact_match": "GET", "invert_match": true}]}}]}
]`

func rulesConfig(t testing.TB) string {
	t.Helper()
	doc, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	return `{"domain": "edge", "rate_limits": ` + edgeLimits + `, "rules": [` + string(doc) + `],
	  "headers": {"x_ratelimit": true, "draft": true}}`
}

// edgeDescriptors builds what Envoy sends the rate-limit service for one
// request under edgeLimits, written from Envoy's documentation of each
// action, independently of the filter's code.
func edgeDescriptors(ip, key, method, path string) []map[string]any {
	desc := func(kv ...string) map[string]any {
		var es []map[string]string
		for i := 0; i < len(kv); i += 2 {
			es = append(es, map[string]string{"key": kv[i], "value": kv[i+1]})
		}
		return map[string]any{"entries": es}
	}
	ds := []map[string]any{desc("remote_address", ip)}
	if key != "" {
		ds = append(ds, desc("api_key", key), desc("api_key", key, "method", method))
	}
	if strings.HasPrefix(path, "/api/") && method != "GET" {
		ds = append(ds, desc("generic_key", "writes", "header_match", "api"))
	}
	return ds
}

// buildBucketgrid builds cmd/bucketgrid (from the workspace) and returns
// the binary's path.
func buildBucketgrid(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bucketgrid")
	build := exec.Command("go", "build", "-o", bin, "github.com/bucketgrid/bucketgrid/cmd/bucketgrid")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/bucketgrid: %v\n%s", err, out)
	}
	return bin
}

// startBucketgrid runs bin on rulesFile with buckets in memory and returns
// its HTTP address; stop ends it.
func startBucketgrid(t *testing.T, bin string) (addr string, stop func()) {
	t.Helper()
	cmd := exec.Command(bin, "-config", rulesFile, "-backend", "memory", "-grpc-addr", "127.0.0.1:0",
		"-http-addr", "127.0.0.1:0", "-drain-grace", "0", "-headers", "x-ratelimit,draft,retry-after")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait() }
	t.Cleanup(stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("bucketgrid did not start: %v\n%s", err, stderr.String())
	}
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "http="); ok {
			return v, stop
		}
	}
	t.Fatalf("no http= in %q", line)
	return "", stop
}

type rlsAnswer struct {
	OverallCode string `json:"overallCode"`
	Statuses    []struct {
		Code           string `json:"code"`
		LimitRemaining uint32 `json:"limitRemaining"`
	} `json:"statuses"`
	ResponseHeadersToAdd []struct {
		Key, Value string
	} `json:"responseHeadersToAdd"`
}

func askService(t *testing.T, addr string, ds []map[string]any) rlsAnswer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"domain": "edge", "descriptors": ds})
	resp, err := http.Post("http://"+addr+"/json", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a rlsAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatalf("service answer (HTTP %d): %v", resp.StatusCode, err)
	}
	return a
}

// secondLater reports whether the filter's value of header k is the
// service's seconds plus one: the filter answered first, and a second may
// end between the two answers.
func secondLater(k, filter, service string) bool {
	if k != "x-ratelimit-reset" && k != "ratelimit-reset" && k != "retry-after" {
		return false
	}
	f, err1 := strconv.Atoi(filter)
	s, err2 := strconv.Atoi(service)
	return err1 == nil && err2 == nil && f == s+1
}

// TestWasmRulesDecideAsTheService loads one rule file into the real .wasm
// (as two worker VMs) and into cmd/bucketgrid, sends the same random
// requests to both (the filter builds the descriptors from the request, the
// service gets them as Envoy would send them) and wants the same decision
// and the same x-ratelimit and ratelimit-* headers for every request. The
// limits are per hour and day; a run that an hour began in cannot judge,
// and starts over on fresh buckets.
func TestWasmRulesDecideAsTheService(t *testing.T) {
	bin := buildBucketgrid(t)
	for range 3 {
		if compareWithService(t, bin) {
			return
		}
		t.Log("an hour began during the comparison: again, on fresh buckets")
	}
	t.Fatal("an hour began during each of three comparisons")
}

// compareWithService runs one comparison; false when an hour began during
// it.
func compareWithService(t *testing.T, bin string) bool {
	e := newEnvoy(t)
	cfg := rulesConfig(t)
	w1, ok1 := e.newWorker(cfg)
	w2, ok2 := e.newWorker(cfg)
	if !ok1 || !ok2 {
		t.Fatalf("configure refused: %q %q", w1.logs, w2.logs)
	}
	addr, stop := startBucketgrid(t, bin)
	defer stop()
	rng := rand.New(rand.NewPCG(7, 21))
	ips := []string{"192.0.2.1", "192.0.2.2", "2001:db8::1"}
	keys := []string{"", "alice", "bob", "partner", "revoked"}
	methods := []string{"GET", "POST", "PUT"}
	paths := []string{"/api/v1", "/health"}
	const n = 120
	refused, start := 0, time.Now()
	for i := range n {
		ip, key := ips[rng.IntN(len(ips))], keys[rng.IntN(len(keys))]
		method, path := methods[rng.IntN(len(methods))], paths[rng.IntN(len(paths))]
		hdrs := map[string]string{":path": path, ":method": method}
		if key != "" {
			hdrs["x-api-key"] = key
		}
		source := ip + ":40000"
		if strings.Contains(ip, ":") {
			source = "[" + ip + "]:40000"
		}
		e.clock.Store(time.Now().UnixNano())
		got := []*worker{w1, w2}[i%2].do(source, hdrs)
		want := askService(t, addr, edgeDescriptors(ip, key, method, path))
		if time.Now().Truncate(time.Hour) != start.Truncate(time.Hour) {
			return false
		}
		what := ip + " " + key + " " + method + " " + path
		if (got.status == 429) != (want.OverallCode == "OVER_LIMIT") {
			t.Fatalf("request %d (%s): filter %d, service %s", i, what, got.status, want.OverallCode)
		}
		if got.status == 429 {
			refused++
		}
		if len(want.ResponseHeadersToAdd) == 0 {
			t.Fatalf("request %d (%s): the service added no headers", i, what)
		}
		for _, h := range want.ResponseHeadersToAdd {
			if got.headers[h.Key] != h.Value && !secondLater(h.Key, got.headers[h.Key], h.Value) {
				t.Fatalf("request %d (%s): %s = %q, the service's %q (filter: %v)", i, what,
					h.Key, got.headers[h.Key], h.Value, got.headers)
			}
		}
	}
	if refused == 0 || refused == n {
		t.Fatalf("%d of %d refused: the comparison judged nothing", refused, n)
	}
	t.Logf("%d requests, %d refused: the same answers and headers from the filter and the service", n, refused)
	return true
}
