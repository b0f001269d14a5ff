package layers

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/bucketgrid/bucketgrid"

// floors gives each part of the workspace its floor, lowest first: a
// package may import packages of lower floors and of its own part (the
// longest entry naming a prefix of its path), never one of its own floor's
// other parts (sideways) or above. Harness packages are test scaffolding:
// only _test.go files may import them, from any floor.
var floors = [][]string{
	{"internal/errwrap", "internal/header", "internal/ruledoc", "clock", "retry"},
	{"core"},
	{"core/wire"},
	{"cas"},
	{""}, // the root package, bucketgrid
	{"grid/olric", "grid/redis", "grid/mongo", "grid/couchbase", "tck", "policy", "localmap"},
	{"httplimit", "wasmfilter"},
	{"cmd/bucketgrid"},
	{"examples", "internal/layers"},
}

// rooms gives the internal packages of a part (under its internal/) their
// own floors inside the part, lowest first. A room may import rooms of lower
// floors and packages below its part's floor; never its part's other
// packages (up), nor another room of its floor (sideways), and its tests
// are held to the same. The part's other packages may import every room.
// An internal package of a part listed here must have a room.
var rooms = map[string][][]string{
	"grid/olric": {
		{"grid/olric/internal/fence", "grid/olric/internal/frame", "grid/olric/internal/journal", "grid/olric/internal/lost"},
		{"grid/olric/internal/trust"},
	},
}

// room returns the room of rel inside part, its floor there
// (len(rooms[part]) for the part's packages outside its rooms), and whether
// it is the part's internal package without a room.
func room(part, rel string) (string, int, bool) {
	fs, ok := rooms[part]
	if !ok {
		return "", 0, false
	}
	for f, rs := range fs {
		for _, r := range rs {
			if rel == r || strings.HasPrefix(rel, r+"/") {
				return r, f, false
			}
		}
	}
	return "", len(fs), strings.HasPrefix(rel, part+"/internal/")
}

// harnesses are the test scaffolding parts.
var harnesses = []string{"internal/harness", "internal/netbed"}

// part returns the entry of floors or harnesses that path belongs to, its
// floor (len(floors) for a harness), and whether it has one.
func part(path string) (string, int, bool) {
	rel, ok := strings.CutPrefix(path, module)
	if !ok {
		return "", 0, false
	}
	rel = strings.TrimPrefix(rel, "/")
	best, floor, found := "", 0, false
	consider := func(p string, f int) {
		if (p == "" && rel == "") || (p != "" && (rel == p || strings.HasPrefix(rel, p+"/"))) {
			if !found || len(p) > len(best) {
				best, floor, found = p, f, true
			}
		}
	}
	for f, ps := range floors {
		for _, p := range ps {
			consider(p, f)
		}
	}
	for _, p := range harnesses {
		consider(p, len(floors))
	}
	return best, floor, found
}

type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// workspace lists every package of the workspace with its imports.
func workspace(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages: not the workspace", len(pkgs))
	}
	return pkgs
}

// TestLayers fails for every import that points up the floors or sideways,
// and for a harness imported by code that is not a test.
func TestLayers(t *testing.T) {
	for _, p := range workspace(t) {
		from, ff, ok := part(p.ImportPath)
		if !ok {
			t.Errorf("%s has no floor: add its part to floors (or harnesses) in this file", p.ImportPath)
			continue
		}
		check := func(imp string, test bool) {
			to, tf, ok := part(imp)
			if ok && to == from && imp != p.ImportPath {
				checkRoom(t, from, p.ImportPath, imp)
			}
			if !ok || to == from || imp == p.ImportPath {
				return // outside the module, or within its own part
			}
			switch {
			case tf == len(floors) && test:
			case tf == len(floors):
				t.Errorf("%s imports the test harness %s outside its tests", p.ImportPath, imp)
			case test && ff != len(floors):
				// tests may reach above their package's floor (the kit, a
				// front door driving a backend), but never examples or mains
				if tf == len(floors)-1 || to == "cmd/bucketgrid" && !strings.HasPrefix(from, "cmd/") {
					t.Errorf("a test of %s imports %s", p.ImportPath, imp)
				}
			case tf >= ff:
				t.Errorf("%s (floor %d, %q) imports %s (floor %d, %q): up or sideways", p.ImportPath, ff, from, imp, tf, to)
			}
		}
		if _, _, lost := room(from, strings.TrimPrefix(p.ImportPath, module+"/")); lost {
			t.Errorf("%s has no room: add it to rooms[%q] in this file", p.ImportPath, from)
		}
		for _, imp := range p.Imports {
			check(imp, ff == len(floors))
		}
		for _, imp := range slices.Concat(p.TestImports, p.XTestImports) {
			check(imp, true)
		}
	}
}

// checkRoom fails for an import from one package of part to another that
// points up or sideways among the part's rooms.
func checkRoom(t *testing.T, part, path, imp string) {
	t.Helper()
	if _, ok := rooms[part]; !ok {
		return
	}
	from, ff, _ := room(part, strings.TrimPrefix(path, module+"/"))
	to, tf, _ := room(part, strings.TrimPrefix(imp, module+"/"))
	if (from != to || from == "") && tf >= ff {
		t.Errorf("%s (room floor %d of %s) imports %s (room floor %d): up or sideways inside %s", path, ff, part, imp, tf, part)
	}
}
