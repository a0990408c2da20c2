package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readsErrorText are the places that may read an error's text, each for a
// library that gives the fact as text only.
var readsErrorText = map[string]string{
	// encoding/json reports an unknown field as `json: unknown field "x"`
	// and with no type of its own.
	"server/errors.go": "encoding/json's unknown field",
}

// TestNoErrorText: no production code takes an error's text apart with
// the strings package (strings.Contains(err.Error(), …), TrimPrefix,
// CutPrefix, …), and a conflict carries its reason as a
// store.ConflictError rather than in text around ErrConflict. A condition an error stands for is a sentinel (errors.Is)
// or a type (errors.As: store.FieldError, store.ConflictError), so that a
// message can change without changing what the code decides.
func TestNoErrorText(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	var found []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "bench", "node_modules", "testdata", ".git", "clients":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, "../"))
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok || (pkg.Name != "strings" && pkg.Name != "fmt") || sel.Sel.Name == "TrimRight" || sel.Sel.Name == "TrimSpace" {
				return true // trimming white space off a message is layout
			}
			if pkg.Name == "fmt" && sel.Sel.Name == "Errorf" && isConflict(call.Args[len(call.Args)-1]) {
				found = append(found, fset.Position(call.Pos()).String()+": fmt.Errorf wrapping ErrConflict (use store.Conflictf, whose reason the API and the CLI show)")
			}
			if pkg.Name == "strings" && isErrorCall(call.Args[0]) {
				if _, ok := readsErrorText[rel]; !ok {
					found = append(found, fset.Position(call.Pos()).String()+": strings."+sel.Sel.Name+" on an error's text")
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "test a sentinel with errors.Is or a type with errors.As instead")
}

// isConflict reports whether e names the sentinel ErrConflict.
func isConflict(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "ErrConflict"
}

// isErrorCall reports whether e is a call of a method Error with no
// arguments.
func isErrorCall(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) != 0 {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Error"
}
