// Command wasmsize says what a Go-built WebAssembly module spends its bytes
// on: the size of each section, and the code section's bytes per Go package
// (largest first), read from the module's "name" section. `go tool nm`
// cannot read wasm, and the linker drops the name section under -s, so give
// it a build without -s; code sizes are the same with or without it:
//
//	cd wasmfilter
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o /tmp/filter-sym.wasm ./cmd/filter
//	go run ./cmd/wasmsize /tmp/filter-sym.wasm
//
// scripts/build-wasm.sh --sizes does both. Flags: -n limits the number of
// packages shown (default 40), -f prints the largest functions instead.
//
// The data section (type descriptors, the function table with every
// function's name, strings) carries no names, so it is shown as one number;
// it shrinks with the code, since most of it describes the linked functions
// and their types.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	n := flag.Int("n", 40, "show at most `n` packages (or functions with -f)")
	funcs := flag.Bool("f", false, "list the largest functions instead of packages")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: wasmsize [-n count] [-f] module.wasm")
		os.Exit(2)
	}
	b, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	m, err := parse(b)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	report(os.Stdout, m, *n, *funcs)
}

// module is what wasmsize reads from a module: its sections' sizes and the
// body size of every function defined in it, with its name.
type module struct {
	size     int
	sections []section
	funcs    []function
}

type section struct {
	name string // "code", "data", … or a custom section's own name
	size int    // the section's payload, without its id and size bytes
}

type function struct {
	name string // as the name section spells it, "" if it has none
	size int    // the body, with its size prefix
}

var sectionNames = [...]string{"custom", "type", "import", "function", "table", "memory", "global", "export",
	"start", "element", "code", "data", "datacount"}

var errTruncated = errors.New("wasmsize: module truncated")

// parse reads the sections of a binary module (WebAssembly core spec §5).
func parse(b []byte) (*module, error) {
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return nil, errors.New("wasmsize: not a WebAssembly module")
	}
	m := &module{size: len(b)}
	imported := 0
	var names map[int]string
	r := reader{b: b, off: 8}
	for r.off < len(b) {
		id := r.byte()
		size := int(r.uleb())
		if r.err != nil || size > len(b)-r.off {
			return nil, errTruncated
		}
		payload := reader{b: b[r.off : r.off+size]}
		r.off += size
		name := fmt.Sprintf("section %d", id)
		if int(id) < len(sectionNames) {
			name = sectionNames[id]
		}
		switch id {
		case 0:
			name = payload.name()
			if name == "name" {
				names = payload.functionNames()
			}
		case 2:
			imported = payload.functionImports()
		case 10:
			for i, n := 0, int(payload.uleb()); i < n && payload.err == nil; i++ {
				start := payload.off
				body := int(payload.uleb())
				payload.off += body
				if payload.off > len(payload.b) {
					payload.err = errTruncated
					break
				}
				m.funcs = append(m.funcs, function{size: payload.off - start})
			}
		}
		if payload.err != nil {
			return nil, fmt.Errorf("wasmsize: %s section: %w", name, payload.err)
		}
		m.sections = append(m.sections, section{name, size})
	}
	for i := range m.funcs {
		m.funcs[i].name = names[imported+i]
	}
	return m, nil
}

type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) byte() byte {
	if r.off >= len(r.b) {
		r.err = errTruncated
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

func (r *reader) uleb() uint64 {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		c := r.byte()
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v
		}
	}
	r.err = errors.New("wasmsize: integer too long")
	return 0
}

func (r *reader) name() string {
	n := int(r.uleb())
	if n > len(r.b)-r.off {
		r.err = errTruncated
		return ""
	}
	r.off += n
	return string(r.b[r.off-n : r.off])
}

// functionImports counts the function imports of an import section: they
// take the first function indices.
func (r *reader) functionImports() int {
	count := 0
	for i, n := 0, int(r.uleb()); i < n && r.err == nil; i++ {
		r.name()
		r.name()
		switch r.byte() {
		case 0: // function: type index
			r.uleb()
			count++
		case 1: // table: element type, limits
			r.byte()
			r.limits()
		case 2: // memory: limits
			r.limits()
		case 3: // global: value type, mutability
			r.byte()
			r.byte()
		default:
			r.err = errors.New("wasmsize: unknown import kind")
		}
	}
	return count
}

func (r *reader) limits() {
	if r.byte()&1 != 0 {
		r.uleb()
	}
	r.uleb()
}

// functionNames reads the function-names subsection of a "name" section,
// after its name.
func (r *reader) functionNames() map[int]string {
	names := map[int]string{}
	for r.off < len(r.b) && r.err == nil {
		id := r.byte()
		size := int(r.uleb())
		if size > len(r.b)-r.off {
			r.err = errTruncated
			break
		}
		if id != 1 {
			r.off += size
			continue
		}
		for i, n := 0, int(r.uleb()); i < n && r.err == nil; i++ {
			idx := int(r.uleb())
			names[idx] = r.name()
		}
	}
	return names
}

// pkg returns the Go package of a function name as Go's wasm linker writes
// it, with every character but letters, digits, '_' and '.' replaced by '_'
// ("github.com_x_y_core.__T_.M" for github.com/x/y/core.(*T).M): the text
// before the first '.' that follows the package path, with '_' read back as
// '/'. A path starting with a domain ("github.com/…") is recognised by its
// top-level domain; a package whose path has a '_' of its own is shown with
// a '/' there. Compiler-generated functions on types ("type:.eq.…") group
// as "type:".
func pkg(name string) string {
	switch {
	case name == "":
		return "(unnamed)"
	case strings.HasPrefix(name, "type_."):
		return "type:"
	case strings.HasPrefix(name, "go_"):
		return "go:"
	}
	dot := strings.IndexByte(name, '.')
	if dot < 0 {
		return name
	}
	if tld, _, ok := strings.Cut(name[dot+1:], "_"); ok && domains[tld] && !strings.Contains(name[:dot], "_") {
		start := dot + 1 + len(tld)
		if next := strings.IndexByte(name[start:], '.'); next >= 0 {
			dot = start + next
		}
	}
	return strings.ReplaceAll(name[:dot], "_", "/")
}

// domains are the top-level domains of module paths wasmsize recognises.
var domains = map[string]bool{"com": true, "org": true, "net": true, "io": true, "in": true, "dev": true}

type total struct {
	name  string
	size  int
	count int
}

func report(w io.Writer, m *module, n int, funcs bool) {
	fmt.Fprintf(w, "%d bytes\n", m.size)
	for _, s := range m.sections {
		fmt.Fprintf(w, "  %-12s %9d\n", s.name, s.size)
	}
	var rows []total
	if funcs {
		for _, f := range m.funcs {
			rows = append(rows, total{f.name, f.size, 1})
		}
	} else {
		by := map[string]*total{}
		for _, f := range m.funcs {
			p := pkg(f.name)
			if by[p] == nil {
				by[p] = &total{name: p}
			}
			by[p].size += f.size
			by[p].count++
		}
		for _, t := range by {
			rows = append(rows, *t)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].size != rows[j].size {
			return rows[i].size > rows[j].size
		}
		return rows[i].name < rows[j].name
	})
	fmt.Fprintf(w, "\ncode by %s (bytes, functions):\n", map[bool]string{false: "package", true: "function"}[funcs])
	for i, t := range rows {
		if i == n {
			fmt.Fprintf(w, "  … %d more\n", len(rows)-n)
			break
		}
		fmt.Fprintf(w, "  %9d %5d  %s\n", t.size, t.count, t.name)
	}
}
