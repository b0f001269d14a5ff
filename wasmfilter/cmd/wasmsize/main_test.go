package main

import (
	"bytes"
	"strings"
	"testing"
)

// module builds a small binary module: one imported function, two defined
// functions with bodies of 3 and 5 bytes, and a name section naming all
// three.
func testModule() []byte {
	sec := func(id byte, payload ...byte) []byte { return append([]byte{id, byte(len(payload))}, payload...) }
	name := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	var imp []byte
	imp = append(imp, 1) // one import
	imp = append(imp, name("env")...)
	imp = append(imp, name("proxy_log")...)
	imp = append(imp, 0, 0) // function, type 0
	var names []byte
	names = append(names, 3)
	for i, n := range []string{"env.proxy_log", "github.com_x_y_core.__T_.M", "runtime.gcStart"} {
		names = append(names, byte(i))
		names = append(names, name(n)...)
	}
	var nameSec []byte
	nameSec = append(nameSec, name("name")...)
	nameSec = append(nameSec, 1, byte(len(names)))
	nameSec = append(nameSec, names...)
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, sec(1, 1, 0x60, 0, 0)...) // one type: func() ()
	m = append(m, sec(2, imp...)...)
	m = append(m, sec(3, 2, 0, 0)...)
	m = append(m, sec(10, 2, 2, 0, 0x0b, 4, 0, 0x01, 0x01, 0x0b)...)
	m = append(m, sec(0, nameSec...)...)
	return m
}

func TestParse(t *testing.T) {
	m, err := parse(testModule())
	if err != nil {
		t.Fatal(err)
	}
	want := []function{{"github.com_x_y_core.__T_.M", 3}, {"runtime.gcStart", 5}}
	if len(m.funcs) != len(want) {
		t.Fatalf("funcs = %+v, want %+v", m.funcs, want)
	}
	for i := range want {
		if m.funcs[i] != want[i] {
			t.Errorf("func %d = %+v, want %+v", i, m.funcs[i], want[i])
		}
	}
	var secs []string
	for _, s := range m.sections {
		secs = append(secs, s.name)
	}
	if got := strings.Join(secs, " "); got != "type import function code name" {
		t.Errorf("sections %q", got)
	}
	var out bytes.Buffer
	report(&out, m, 10, false)
	for _, line := range []string{"        5     1  runtime", "        3     1  github.com/x/y/core"} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("report lacks %q:\n%s", line, out.String())
		}
	}
}

// TestParseTruncated: a prefix of a module that ends between sections is a
// module of fewer sections; every other prefix is an error, never a panic
// or a partial answer.
func TestParseTruncated(t *testing.T) {
	b := testModule()
	full, err := parse(b)
	if err != nil {
		t.Fatal(err)
	}
	boundary := map[int]bool{8: true}
	end := 8
	for _, s := range full.sections {
		end += 2 + s.size // one byte of id, one of size in this module
		boundary[end] = true
	}
	for n := range len(b) {
		if _, err := parse(b[:n]); (err == nil) != boundary[n] {
			t.Errorf("prefix of %d bytes: %v", n, err)
		}
	}
}

func TestPkg(t *testing.T) {
	tests := []struct{ name, want string }{
		{"runtime.gcStart", "runtime"},
		{"runtime.__mheap_.alloc", "runtime"},
		{"internal_runtime_maps.__Iter_.Next", "internal/runtime/maps"},
		{"github.com_bucketgrid_bucketgrid_core.__decoder_.fail", "github.com/bucketgrid/bucketgrid/core"},
		{"github.com_bucketgrid_bucketgrid_wasmfilter_proxywasm.host.Header", "github.com/bucketgrid/bucketgrid/wasmfilter/proxywasm"},
		{"gopkg.in_yaml.v3.Marshal", "gopkg.in/yaml"},
		{"syscall.fd_write", "syscall"},
		{"slices.Sort_go.shape.int_", "slices"},
		{"type_.eq.time.Time", "type:"},
		{"go_buildid", "go:"},
		{"", "(unnamed)"},
	}
	for _, tt := range tests {
		if got := pkg(tt.name); got != tt.want {
			t.Errorf("pkg(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}
