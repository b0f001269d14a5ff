package policy_test

import (
	"strconv"
	"strings"
	"testing"

	. "github.com/bucketgrid/bucketgrid/policy"
	"github.com/bucketgrid/bucketgrid/policy/rulefile"
)

// load compiles YAML documents named f0.yaml, f1.yaml….
func load(t *testing.T, opts Options, docs ...string) *Rules {
	t.Helper()
	files := make([]rulefile.File, len(docs))
	for i, d := range docs {
		files[i] = rulefile.File{Name: "f" + strconv.Itoa(i) + ".yaml", Data: []byte(d)}
	}
	c, err := rulefile.Load(files, opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

// yml turns the two-space indented, '|'-margined literal into YAML, so the
// tables stay readable.
func yml(s string) string {
	lines := strings.Split(strings.TrimPrefix(s, "\n"), "\n")
	for i, l := range lines {
		if j := strings.IndexByte(l, '|'); j >= 0 {
			lines[i] = l[j+1:]
		}
	}
	return strings.Join(lines, "\n")
}
