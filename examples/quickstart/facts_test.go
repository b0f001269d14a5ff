package quickstart

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/grid/olric"
	"github.com/bucketgrid/bucketgrid/httplimit"
)

// A document is a file whose prose a reader takes for the truth: every
// Markdown file of the repository and every package's doc.go.
type document struct {
	path string // from the root, with slashes
	text []byte
}

// documents returns the repository's documents, or skips the test outside
// a checkout.
func documents(t *testing.T) (root string, docs []document) {
	t.Helper()
	root = filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.work")); os.IsNotExist(err) {
		t.Skip("not a checkout of the repository")
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Ext(path) != ".md" && d.Name() != "doc.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		docs = append(docs, document{filepath.ToSlash(rel), b})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 20 {
		t.Fatalf("found %d documents: the walk missed the repository", len(docs))
	}
	return root, docs
}

// line is the line number of offset i in b.
func line(b []byte, i int) int { return bytes.Count(b[:i], []byte("\n")) + 1 }

// TestFactsStatedOnce: a fact whose figures change as it is measured again
// lives in one document, which the others link to; a second statement
// would drift from the first (the README once said a crashed member's keys
// were unavailable for 6–7 s in three places and p50 0.48 s in a fourth).
func TestFactsStatedOnce(t *testing.T) {
	_, docs := documents(t)
	facts := []struct {
		what  string
		owner string // the one document allowed to state it; "" for none
		re    *regexp.Regexp
	}{
		{"how long a crashed grid member's keys are unavailable", "grid/olric/README.md",
			regexp.MustCompile(`(?i)unavailab\w*\s+(for\s+)?(about\s+)?\d[\d.,]*\s*(–|-)?\s*[\d.,]*\s*(s|ms|seconds)\b|\bp50 \d[\d.]* s, p99 \d[\d.]* s`)},
		{"whether a network split is covered (the grid heals splits; Quorum refuses the minority)", "",
			regexp.MustCompile(`(?i)split[^.|]{0,80}\bnot covered\b`)},
		{"the demo's cold build time", "docs/testing.md",
			regexp.MustCompile(`(?i)8 min 41 s|a minute or more before it prints`)},
	}
	for _, f := range facts {
		for _, d := range docs {
			if d.path == f.owner {
				continue
			}
			for _, m := range f.re.FindAllIndex(d.text, -1) {
				where := "nowhere: it is wrong"
				if f.owner != "" {
					where = "only in " + f.owner + "; link there"
				}
				t.Errorf("%s:%d states %s (%q): state it %s", d.path, line(d.text, m[0]), f.what, d.text[m[0]:m[1]], where)
			}
		}
	}
}

// duration matches a figure such as "1.5 s", "250 ms", "30 s".
var duration = regexp.MustCompile(`^[^.;|\n]{0,30}?\b(\d+(?:\.\d+)?)\s?(ms|s)\b`)

// TestDefaultsAgree: wherever a document names a default next to its
// figure ("HandoverGrace (1.5 s)"), the figure is the code's default.
func TestDefaultsAgree(t *testing.T) {
	_, docs := documents(t)
	lan := olric.DefaultLANConfig()
	defaults := []struct {
		name *regexp.Regexp
		want time.Duration
	}{
		{regexp.MustCompile("`HandoverGrace`|\\bHandoverGrace\\b"), lan.HandoverGrace},
		{regexp.MustCompile("`JoinTimeout`|\\bJoinTimeout\\b"), lan.JoinTimeout},
		{regexp.MustCompile("`(httplimit\\.)?WithTimeout`"), httplimit.DefaultTimeout},
		{regexp.MustCompile("`Degrade\\.Timeout`"), bucketgrid.DefaultDegradeTimeout},
	}
	checked := 0
	for _, def := range defaults {
		for _, d := range docs {
			for _, m := range def.name.FindAllIndex(d.text, -1) {
				if m[1] < len(d.text) && (d.text[m[1]] == '-' || d.text[m[1]] == '.') {
					continue // an expression such as HandoverGrace-RoutingLease
				}
				fig := duration.FindSubmatch(d.text[m[1]:])
				if fig == nil {
					continue
				}
				n, err := strconv.ParseFloat(string(fig[1]), 64)
				if err != nil {
					t.Fatal(err)
				}
				unit := time.Second
				if string(fig[2]) == "ms" {
					unit = time.Millisecond
				}
				checked++
				if got := time.Duration(n * float64(unit)); got != def.want {
					t.Errorf("%s:%d: %s followed by %s %s: the default is %v", d.path, line(d.text, m[0]), d.text[m[0]:m[1]], fig[1], fig[2], def.want)
				}
			}
		}
	}
	if checked < 4 {
		t.Fatalf("checked %d figures of defaults: the patterns found none", checked)
	}
}

// link matches a Markdown link's target: [text](target).
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinksResolve: every relative link of a Markdown file names a file
// of the repository, and every #anchor a heading of the file it points to,
// so that a fact moved to another document stays one click away.
func TestDocLinksResolve(t *testing.T) {
	root, docs := documents(t)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
		a := map[string]bool{}
		if err == nil {
			inCode := false
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "```") {
					inCode = !inCode
				}
				if !inCode && strings.HasPrefix(l, "#") {
					a[slug(strings.TrimLeft(l, "#"))] = true
				}
			}
		}
		anchors[path] = a
		return a
	}
	checked := 0
	for _, d := range docs {
		if !strings.HasSuffix(d.path, ".md") {
			continue
		}
		for _, m := range link.FindAllSubmatchIndex(d.text, -1) {
			target := string(d.text[m[2]:m[3]])
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := d.path
			if file != "" {
				path = filepath.ToSlash(filepath.Join(filepath.Dir(d.path), file))
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(path))); err != nil {
					t.Errorf("%s:%d links to %s: no such file", d.path, line(d.text, m[0]), target)
					continue
				}
			}
			checked++
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
				t.Errorf("%s:%d links to %s: %s has no heading #%s", d.path, line(d.text, m[0]), target, path, anchor)
			}
		}
	}
	if checked < 30 {
		t.Fatalf("checked %d links: the pattern found too few", checked)
	}
}

// slug is the anchor GitHub gives a heading: lower case, punctuation
// dropped, spaces as hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
