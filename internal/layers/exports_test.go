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

// parseDir parses the non-test Go files of package dir.
func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*ast.File
	fset := token.NewFileSet()
	for _, fn := range files {
		if strings.HasSuffix(fn, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, fn, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// exported counts what package dir exports, as a reader of its
// documentation meets it: exported top-level names (types, functions,
// constants, variables), exported methods of exported types, exported fields
// of exported struct types and the methods of exported interfaces. Test
// files are left out.
func exported(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, f := range parseDir(t, dir) {
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

// shape counts, over package dir's non-test files, the fields of struct
// type name (each name; an embedded field counts once) and the methods
// whose receiver is name or *name, exported or not.
func shape(t *testing.T, dir, name string) (fields, methods int) {
	t.Helper()
	for _, f := range parseDir(t, dir) {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					continue
				}
				rt := d.Recv.List[0].Type
				if s, ok := rt.(*ast.StarExpr); ok {
					rt = s.X
				}
				if id, ok := rt.(*ast.Ident); ok && id.Name == name {
					methods++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok || ts.Name.Name != name {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						t.Fatalf("%s in %s is not a struct", name, dir)
					}
					for _, fl := range st.Fields.List {
						fields += max(len(fl.Names), 1)
					}
				}
			}
		}
	}
	return fields, methods
}

// typeBudgets bounds the types that compose a package's rooms: the most
// fields and methods each may have. A concept that grows such a type
// instead of owning a type of its own breaks its budget; lower a budget as
// rooms move out. grid/olric's Member composes the owner channel, the
// peers, the owner side, routing, membership, the Olric node and trust
// (the aim: 15 fields and 20 methods).
var typeBudgets = []struct {
	pkg, name       string
	fields, methods int
}{
	{"grid/olric", "Member", 17, 25},
}

// TestTypeBudgets holds each type of typeBudgets to its budget.
func TestTypeBudgets(t *testing.T) {
	for _, b := range typeBudgets {
		fields, methods := shape(t, filepath.Join("..", "..", b.pkg), b.name)
		t.Logf("%s.%s: %d fields (budget %d), %d methods (budget %d)", b.pkg, b.name, fields, b.fields, methods, b.methods)
		if fields == 0 || methods == 0 {
			t.Fatalf("counted %d fields and %d methods: the counter lost %s.%s", fields, methods, b.pkg, b.name)
		}
		if fields > b.fields {
			t.Errorf("%s.%s has %d fields, budget %d: give the new concept a type of its own", b.pkg, b.name, fields, b.fields)
		}
		if methods > b.methods {
			t.Errorf("%s.%s has %d methods, budget %d: give the new concept a type of its own", b.pkg, b.name, methods, b.methods)
		}
	}
}
