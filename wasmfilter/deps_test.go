package wasmfilter_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// heavyPackages are packages the .wasm must not link, each with what it
// cost: a package that imports one of them pulls its weight back, whatever
// the size guard (TestWasmImportsWithinEnvoy) says at the time.
var heavyPackages = map[string]string{
	"fmt":           "a reflection-driven printer, with reflect and os: about 430 KB",
	"os":            "files and the process environment, which the filter never uses",
	"runtime/debug": "imports fmt and os (cas takes its stack from runtime.Stack)",
	"encoding/json": "reflection: a fifth of the module (the filter has its own JSON reader)",
	"crypto/sha256": "Go's FIPS 140 module: about 285 KB (core has its own SHA-256)",
	"encoding/hex":  "imports fmt",
}

// TestWasmDependencies lists the packages cmd/filter links for wasip1 and
// fails on any of heavyPackages, naming the packages that import it.
func TestWasmDependencies(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}: {{join .Imports " "}}`, "./cmd/filter")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	importers := map[string][]string{}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, ": ")
		for _, imp := range strings.Fields(imports) {
			importers[imp] = append(importers[imp], pkg)
		}
	}
	if len(lines) < 20 || importers["github.com/bucketgrid/bucketgrid/core"] == nil {
		t.Fatalf("go list gave %d packages, without core: %s", len(lines), out)
	}
	for pkg, why := range heavyPackages {
		if by := importers[pkg]; by != nil {
			t.Errorf("filter.wasm links %s (%s), imported by %s", pkg, why, strings.Join(by, ", "))
		}
	}
}
