package layers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// maxClimbs is the most calls back up a request's walk may make.
const maxClimbs = 2

// Ranks of the walk, highest first: the order a request goes down, stated
// here rather than taken from floors, because an executor is the Manager's
// implementation of an SPI (grid/olric sits above the root by imports, below
// the Manager in the walk) and a store is its executor's.
const (
	rankCore     = iota // core, core/wire and the leaf utilities (clock, retry, internal/...)
	rankStore           // what an executor stores in: cas/memstore, the filter's shared-data store
	rankExecutor        // cas, grid/...
	rankManager         // the root package
	rankPolicy          // policy
	rankDoor            // cmd/bucketgrid/..., httplimit, wasmfilter
)

// roomOf returns the room a frame of function fn in file runs in and its
// rank; false for a frame outside the workspace's instrumented code.
func roomOf(fn, file string) (string, int, bool) {
	rel, ok := strings.CutPrefix(fn, module)
	if !ok || strings.HasSuffix(file, "_test.go") {
		return "", 0, false
	}
	// the package path ends at the first dot after its last slash; the
	// root package's functions start with one
	var pkg string
	if rel, ok = strings.CutPrefix(rel, "/"); ok {
		dir, name := "", rel
		if i := strings.LastIndex(rel, "/"); i >= 0 {
			dir, name = rel[:i+1], rel[i+1:]
		}
		pkg = dir + strings.SplitN(name, ".", 2)[0]
	}
	under := func(p string) bool { return pkg == p || strings.HasPrefix(pkg, p+"/") }
	switch {
	case pkg == "wasmfilter" && slices.Contains([]string{"store.go", "records.go", "room.go"}, filepath.Base(file)):
		return "wasmfilter store", rankStore, true
	case pkg == "wasmfilter" && filepath.Base(file) == "host.go",
		under("wasmfilter/internal/shareddata"), under("wasmfilter/internal/envoystats"):
		// the Host SPI's helpers and the stand-ins for Envoy's shared data
		// and stats: the host, under everything the filter runs
		return "host", rankCore, true
	case under("cmd/bucketgrid"), under("httplimit"), under("wasmfilter"):
		return pkg, rankDoor, true
	case under("policy"):
		return pkg, rankPolicy, true
	case pkg == "":
		return "bucketgrid (root)", rankManager, true
	case under("cas/memstore"):
		return pkg, rankStore, true
	case under("cas"), under("grid"):
		return pkg, rankExecutor, true
	case under("core"), under("clock"), under("retry"), under("internal"):
		return pkg, rankCore, true
	}
	return pkg, -1, true
}

// TestWalk follows one request from each door down to core and back, and
// fails when the walk does not reach core through policy (httplimit: calls
// policy at all, after), the Manager (the filter has none: it runs cas
// itself, so the .wasm links no root) and an executor, or when it climbs
// back up more than maxClimbs times; go test -v -run TestWalk prints each
// walk and its climbs.
//
// How it sees the walk: it builds the door's TestWalkProbe with an overlay
// that makes every function and closure of the workspace's non-test code
// append the run-time stack (runtime.Callers) at its entry to a file while
// the probe's request runs. Each line is then one call, and consecutive
// stacks give the whole walk in time order: a call enters the stack's
// innermost frame, and the frames the previous stack held below the new
// one's caller have returned in between. A stack by itself shows only the
// current chain; it is the sequence of entry stacks that also shows the
// returns and the calls made before. Frames of test files (the probe, test
// doubles such as the filter's fake host) and of other modules (the
// standard library, gRPC) are transparent.
//
// A climb back up is a call whose callee runs in a room of a higher rank
// (see the rank constants) than its caller's: on a stack, a lower room's
// frame directly followed, deeper, by a higher room's frame, such as the
// Manager calling the door's configuration function or an executor calling
// a store or a clock the door implements. Returning up is not a climb.
func TestWalk(t *testing.T) {
	overlay := instrument(t)
	for _, door := range []struct {
		name, dir, pkg string
		manager        bool // goes through the Manager
		policyFirst    bool // plans in policy before core (httplimit's plans are its own: policy gives its bands and headers after)
	}{
		{"service", "../../cmd/bucketgrid", "./internal/service", true, true},
		{"httplimit", "../..", "./httplimit", true, false},
		{"filter", "../../wasmfilter", ".", false, true},
	} {
		t.Run(door.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "walk")
			cmd := exec.Command("go", "test", "-count=1", "-overlay", overlay, "-run", "^TestWalkProbe$", door.pkg)
			cmd.Dir = door.dir
			cmd.Env = append(os.Environ(), "BUCKETGRID_WALK_OUT="+out)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go test %s: %v\n%s", door.pkg, err, b)
			}
			w := readWalk(t, out)
			t.Logf("%s: %d stays in %d rooms, %d climbs back up, %d returns up\n%s",
				door.name, len(w.stays), w.rooms(), len(w.climbs), w.returns, strings.Join(w.stays, " → "))
			for _, c := range w.climbs {
				t.Logf("climb: %s", c)
			}
			judgeWalk(t, w, door.manager, door.policyFirst)
		})
	}
}

// judgeWalk fails unless w calls policy (with policyFirst, before it
// reaches core) and reaches core through (with manager) the root and an
// executor on one stack, climbing at most maxClimbs times.
func judgeWalk(t *testing.T, w walk, manager, policyFirst bool) {
	t.Helper()
	if len(w.calls) == 0 || w.calls[0][0].rank != rankDoor {
		t.Fatalf("the walk does not start at the door: %v", w.stays)
	}
	policyAt := slices.IndexFunc(w.calls, func(s []frame) bool { return s[len(s)-1].rank == rankPolicy })
	if policyAt < 0 {
		t.Errorf("the request never calls policy")
	}
	want := []int{rankExecutor, rankCore}
	if manager {
		want = []int{rankManager, rankExecutor, rankCore}
	}
	coreAt := slices.IndexFunc(w.calls, func(s []frame) bool {
		if s[len(s)-1].rank != rankCore || !strings.HasPrefix(s[len(s)-1].room, "core") {
			return false
		}
		i := 0
		for _, f := range s {
			if i < len(want) && f.rank == want[i] {
				i++
			}
		}
		return i == len(want)
	})
	if coreAt < 0 {
		t.Errorf("no call reaches core through ranks %v", want)
	} else if policyFirst && policyAt > coreAt {
		t.Errorf("the request reaches core (call %d) before policy (call %d)", coreAt, policyAt)
	}
	if len(w.climbs) > maxClimbs {
		t.Errorf("the walk climbs back up %d times, want at most %d:\n%s", len(w.climbs), maxClimbs, strings.Join(w.climbs, "\n"))
	}
}

type frame struct {
	fn, room string
	rank     int
}

// walk is one request's recorded path.
type walk struct {
	calls   [][]frame // the stack at each call, outermost first, from the door
	stays   []string  // the rooms in the order the walk is in them
	climbs  []string  // caller → callee of each climb back up
	returns int       // returns into a room of a higher rank
}

func (w walk) rooms() int {
	seen := map[string]bool{}
	for _, s := range w.stays {
		seen[s] = true
	}
	return len(seen)
}

// readWalk reads the stacks the instrumented probe wrote and replays them.
func readWalk(t *testing.T, path string) walk {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the probe recorded nothing: %v", err)
	}
	defer f.Close()
	var w walk
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	// replay each goroutine's stack: before each call, return to its
	// caller's frame
	curs := map[string][]frame{}     // by goroutine
	prefixes := map[string][]frame{} // of a goroutine the request started: its frames
	stay := func(r string) {
		if n := len(w.stays); n == 0 || w.stays[n-1] != r {
			w.stays = append(w.stays, r)
		}
	}
	for sc.Scan() {
		// the goroutine, then innermost first: "func file:line\t" per frame
		fields := strings.Split(strings.TrimSuffix(sc.Text(), "\t"), "\t")
		g := fields[0]
		var s []frame
		request := false // the probe's goroutine: below its walkRequest
		for i := len(fields) - 1; i >= 1; i-- {
			fn, file, _ := strings.Cut(fields[i], " ")
			file, _, _ = strings.Cut(file, ":")
			if strings.HasSuffix(fn, ".walkRequest") {
				request, s = true, s[:0]
				continue
			}
			if room, rank, ok := roomOf(fn, file); ok {
				s = append(s, frame{fn, room, rank})
			}
		}
		if request {
			g = "request"
		} else if _, ok := prefixes[g]; !ok {
			// a goroutine the request started (a closure of a function on
			// its stack, such as httplimit's take) continues its walk from
			// there; any other goroutine's calls are not the request's
			from := curs["request"]
			j := -1
			if len(s) > 0 {
				j = slices.IndexFunc(from, func(f frame) bool { return strings.HasPrefix(s[0].fn, f.fn+".func") })
			}
			if j < 0 {
				continue
			}
			prefixes[g] = slices.Clone(from[:j+1])
		}
		s = append(slices.Clone(prefixes[g]), s...)
		if len(s) == 0 {
			continue
		}
		cur := curs[g]
		w.calls = append(w.calls, s)
		// returns: the frames of cur that are not the new call's callers
		k := 0
		for k < len(cur) && k < len(s)-1 && cur[k].fn == s[k].fn {
			k++
		}
		for i := len(cur) - 1; i >= k; i-- {
			if i > 0 {
				if cur[i-1].rank > cur[i].rank {
					w.returns++
				}
				stay(cur[i-1].room)
			}
		}
		callee := s[len(s)-1]
		if len(s) > 1 {
			if caller := s[len(s)-2]; callee.rank > caller.rank {
				w.climbs = append(w.climbs, caller.fn+" ("+caller.room+") → "+callee.fn+" ("+callee.room+")")
			}
		}
		stay(callee.room)
		curs[g] = slices.Clone(s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur := curs["request"]; len(cur) > 0 {
		for i := len(cur) - 1; i > 0; i-- {
			if cur[i-1].rank > cur[i].rank {
				w.returns++
			}
			stay(cur[i-1].room)
		}
	}
	return w
}

// hook is the file the overlay adds to every instrumented package.
const hook = `package %s

import (
	"os"
	"runtime"
	"strconv"
)

// bucketgridWalkEnter appends the goroutine and the caller's stack to
// $BUCKETGRID_WALK_FILE, innermost first, "function file:line" per frame,
// a tab after each.
func bucketgridWalkEnter() {
	path := os.Getenv("BUCKETGRID_WALK_FILE")
	if path == "" {
		return
	}
	var pcs [256]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)] // "goroutine N [running]:..."
	if i := bytesIndex(b, '['); i > 0 {
		b = b[:i]
	}
	b = append(b, '\t')
	for {
		f, more := frames.Next()
		b = append(b, f.Function...)
		b = append(b, ' ')
		b = append(b, f.File...)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(f.Line), 10)
		b = append(b, '\t')
		if !more {
			break
		}
	}
	b = append(b, '\n')
	if f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600); err == nil {
		f.Write(b)
		f.Close()
	}
}

func bytesIndex(b []byte, c byte) int {
	for i := range b {
		if b[i] == c {
			return i
		}
	}
	return -1
}
`

// instrument writes an overlay (see go help build) that calls the hook at
// the entry of every function and closure of the workspace's non-test,
// non-main packages, on the line of its opening brace so that line numbers
// stay, and returns its path.
func instrument(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=Dir,ImportPath,Name,GoFiles", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	dir := t.TempDir()
	replace := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			Dir, ImportPath, Name string
			GoFiles               []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Name == "main" || len(p.GoFiles) == 0 {
			continue
		}
		for _, name := range p.GoFiles {
			src := filepath.Join(p.Dir, name)
			dst := filepath.Join(dir, fmt.Sprintf("%d.go", len(replace)))
			writeFile(t, dst, instrumented(t, src))
			replace[src] = dst
		}
		dst := filepath.Join(dir, fmt.Sprintf("%d.go", len(replace)))
		writeFile(t, dst, []byte(fmt.Sprintf(hook, p.Name)))
		replace[filepath.Join(p.Dir, "zz_bucketgrid_walk.go")] = dst
	}
	b, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "overlay.json")
	writeFile(t, path, b)
	return path
}

// instrumented returns src with a call of the hook after the opening brace
// of every function body.
func instrumented(t *testing.T, src string) []byte {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, src, data, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var at []int
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if n.Body != nil {
				at = append(at, fset.Position(n.Body.Lbrace).Offset+1)
			}
		case *ast.FuncLit:
			at = append(at, fset.Position(n.Body.Lbrace).Offset+1)
		}
		return true
	})
	sort.Sort(sort.Reverse(sort.IntSlice(at)))
	for _, o := range at {
		data = slices.Insert(data, o, []byte("bucketgridWalkEnter();")...)
	}
	return data
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
