package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
)

const dashboardPath = "../../examples/grafana/bucketgrid.json"

// series is what one scrape of /metrics exposes: for every series name,
// its label names and the values seen for each.
type series map[string]map[string]map[string]bool

// scrape reads the text exposition format at url.
func scrape(t *testing.T, url string) series {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	s := series{}
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			t.Fatalf("exposition line %q", line)
		}
		name := line[:end]
		labels := s[name]
		if labels == nil {
			labels = map[string]map[string]bool{}
			s[name] = labels
		}
		if line[end] != '{' {
			continue
		}
		rest := line[end+1:]
		for !strings.HasPrefix(rest, "}") {
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				t.Fatalf("exposition line %q", line)
			}
			key := strings.TrimPrefix(rest[:eq], ",")
			rest = rest[eq+2:]
			var v strings.Builder
			for len(rest) > 0 && rest[0] != '"' {
				if rest[0] == '\\' && len(rest) > 1 {
					rest = rest[1:]
				}
				v.WriteByte(rest[0])
				rest = rest[1:]
			}
			rest = strings.TrimPrefix(strings.TrimPrefix(rest, `"`), ",")
			if labels[key] == nil {
				labels[key] = map[string]bool{}
			}
			labels[key][v.String()] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	metricName = regexp.MustCompile(`\b(bucketgrid_[a-z0-9_]+|go_[a-z0-9_]+|process_[a-z0-9_]+)\b`)
	matcher    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	grouping   = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	labelVals  = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)
)

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = map[string]bool{"job": true, "instance": true}

// TestGrafanaDashboard: every query of examples/grafana/bucketgrid.json
// names series that a running instance exports, with the labels it groups
// and filters by, and the label values it matches exactly.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		if os.IsNotExist(err) && os.Getenv("CI") == "" {
			t.Skipf("%s: not a checkout of the repository", dashboardPath)
		}
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name  string
				Query any
			}
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}

	// An instance that has answered, refused and failed requests, so that
	// every series it can export is there.
	in, _ := memoryInstance(t, "-http-addr", "127.0.0.1:0", "-rlqs", "-rlqs-addr", "127.0.0.1:0")
	c := client(t, in.grpcAddr)
	for range 2 {
		if _, err := call(c, req("srv", "k", "x")); err != nil {
			t.Fatal(err)
		}
	}
	call(c, req("", "k", "x")) // no domain: an invalid request
	r, err := http.Post("http://"+in.httpAddr+"/json", "application/json", strings.NewReader(`{"domain":"srv","descriptors":[{"entries":[{"key":"k","value":"y"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	exported := scrape(t, "http://"+in.httpAddr+"/metrics")

	labelsOf := func(name string) (map[string]map[string]bool, bool) {
		l, ok := exported[name]
		return l, ok
	}
	check := func(where, expr string) {
		names := metricName.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("%s: %q names no series of the service", where, expr)
			return
		}
		for _, n := range names {
			labels, ok := labelsOf(n)
			if !ok {
				t.Errorf("%s: %s is not exported by the service", where, n)
				continue
			}
			for _, m := range matcher.FindAllStringSubmatch(expr, -1) {
				key, op, val := m[1], m[2], m[3]
				if targetLabels[key] {
					continue
				}
				vals, ok := labels[key]
				if !ok {
					t.Errorf("%s: %s has no label %s", where, n, key)
				} else if op == "=" && !vals[val] {
					t.Errorf("%s: %s{%s=%q} never appears (values seen: %v)", where, n, key, val, vals)
				}
			}
			for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
				for _, key := range strings.Split(g[1], ",") {
					key = strings.TrimSpace(key)
					if _, ok := labels[key]; !ok && !targetLabels[key] && key != "" {
						t.Errorf("%s: groups %s by %s, a label it does not have", where, n, key)
					}
				}
			}
		}
	}
	queries := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			check("panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		q, _ := v.Query.(string)
		for _, m := range labelVals.FindAllStringSubmatch(q, -1) {
			queries++
			if _, ok := labelsOf(m[1]); !ok {
				t.Errorf("variable %s: %s is not exported", v.Name, m[1])
			}
			if !targetLabels[m[2]] {
				check("variable "+v.Name, q)
			}
		}
	}
	if queries < 10 {
		t.Fatalf("%d queries checked: the dashboard lost its panels", queries)
	}
}
