package quickstart

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// outside matches what points a reader outside the repository: files of
// the workspace it was written in, the tracker it was planned in, documents
// a clone does not hold.
var outside = regexp.MustCompile(`(?i)shared/(seeds|facts)|\.\./shared\b|/work/|\bthe issue\b|\bissue's\b|\bissue #?[0-9]+|\barticle\b|\bthe guide('s| in)\b`)

// mayReferOutside is a cheap test before the expression: every match of
// outside holds one of these words.
func mayReferOutside(b []byte) bool {
	lower := bytes.ToLower(b)
	for _, w := range []string{"shared", "/work/", "issue", "article", "guide"} {
		if bytes.Contains(lower, []byte(w)) {
			return true
		}
	}
	return false
}

// TestDocsStayInsideTheRepository: no file of the repository (docs, code
// comments, scripts) refers to something a clone does not hold.
func TestDocsStayInsideTheRepository(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.work")); os.IsNotExist(err) {
		t.Skip("not a checkout of the repository")
	}
	self, err := filepath.Abs("docs_test.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(name) {
		case ".md", ".go", ".sh", ".yaml", ".yml", ".html", ".json", ".mod":
		default:
			if name != "test" && name != "run" { // scripts/test, .ci/run
				return nil
			}
		}
		if abs, _ := filepath.Abs(path); abs == self {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		if !mayReferOutside(b) {
			return nil
		}
		// One pass over the file; line numbers only for what matched.
		for _, m := range outside.FindAllIndex(b, -1) {
			rel, _ := filepath.Rel(root, path)
			line := bytes.Count(b[:m[0]], []byte("\n")) + 1
			t.Errorf("%s:%d refers outside the repository (%q): say it in the project's own terms", filepath.ToSlash(rel), line, b[m[0]:m[1]])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files: the walk missed the repository", checked)
	}
}
