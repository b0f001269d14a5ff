package olric

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Member's budget: the most fields and methods it may have. Member
// composes the package's rooms (the owner channel, the peers, the owner
// side, trust, ...), each owning its fields and methods; a concept that
// grows Member instead breaks this budget. Lower it as rooms move out
// (the aim: 15 fields and 20 methods).
const (
	memberFieldBudget  = 17
	memberMethodBudget = 25
)

// memberShape counts, over the package's non-test files, the fields of the
// Member struct (each name; an embedded field counts once) and the methods
// whose receiver is Member or *Member.
func memberShape(t *testing.T) (fields, methods int) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
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
				if d.Recv == nil {
					continue
				}
				rt := d.Recv.List[0].Type
				if s, ok := rt.(*ast.StarExpr); ok {
					rt = s.X
				}
				if id, ok := rt.(*ast.Ident); ok && id.Name == "Member" {
					methods++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok || ts.Name.Name != "Member" {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						t.Fatal("Member is not a struct")
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

// TestMemberBudget holds Member to its budget of fields and methods.
func TestMemberBudget(t *testing.T) {
	fields, methods := memberShape(t)
	t.Logf("Member: %d fields (budget %d), %d methods (budget %d)", fields, memberFieldBudget, methods, memberMethodBudget)
	if fields == 0 || methods == 0 {
		t.Fatalf("counted %d fields and %d methods: the counter lost Member", fields, methods)
	}
	if fields > memberFieldBudget {
		t.Errorf("Member has %d fields, budget %d: give the new concept a type of its own", fields, memberFieldBudget)
	}
	if methods > memberMethodBudget {
		t.Errorf("Member has %d methods, budget %d: give the new concept a type of its own", methods, memberMethodBudget)
	}
}
