package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// exported counts what package dir exports, as a reader of its
// documentation meets it: exported top-level names (types, functions,
// constants, variables), exported methods of exported types, exported fields
// of exported struct types and the methods of exported interfaces. Test
// files are left out.
func exported(t *testing.T, dir string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	fset := token.NewFileSet()
	for _, fn := range files {
		if strings.HasSuffix(fn, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, fn, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() && (d.Recv == nil || receiverExported(d.Recv.List[0].Type)) {
					n++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.IsExported() {
								n++
							}
						}
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							n += 1 + members(s.Type)
						}
					}
				}
			}
		}
	}
	return n
}

func receiverExported(e ast.Expr) bool {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}

// members counts the exported fields of a struct type or methods of an
// interface type.
func members(e ast.Expr) int {
	var list *ast.FieldList
	switch x := e.(type) {
	case *ast.StructType:
		list = x.Fields
	case *ast.InterfaceType:
		list = x.Methods
	default:
		return 0
	}
	n := 0
	for _, f := range list.List {
		for _, id := range f.Names {
			if id.IsExported() {
				n++
			}
		}
	}
	return n
}

// budgets bounds what a package exports: a name over budget
// must earn its place by pushing out another.
var budgets = map[string]int{
	".":         100, // the root package; x/time/rate exports 31
	"httplimit": 75,
	"policy":    100,
}

// TestExportedNames prints (with -v) how many identifiers each package of
// the workspace exports, and fails for a package over its budget; internal
// and main packages count too, their names being exported to the rest of
// the repository only.
func TestExportedNames(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, dir, _ := strings.Cut(line, " ")
		rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		if rel == "" {
			rel = "."
		}
		counts[rel] = exported(t, dir)
		t.Logf("%5d %s", counts[rel], rel)
	}
	// the counter must see the model: a few names any version exports
	if counts["core"] < 10 || counts["."] < 10 {
		t.Fatalf("core exports %d, the root package %d: the counter is broken", counts["core"], counts["."])
	}
	for pkg, max := range budgets {
		if _, ok := counts[pkg]; !ok {
			t.Errorf("budgets names %s, which is no package of the workspace", pkg)
		}
		if counts[pkg] > max {
			t.Errorf("%s exports %d names, over its budget of %d", pkg, counts[pkg], max)
		}
	}
}
