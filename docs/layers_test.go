package docs

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/weftrun/weft"

// TestLayers: the imports of the module's packages follow the layer table
// of architecture.md. Every package has a row (a row ending in /... covers
// its subpackages), and a package imports only packages of lower layers
// or its own row's.
func TestLayers(t *testing.T) {
	t.Parallel()
	layers := layerTable(t)
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{len .GoFiles}} {{join .Imports " "}}`, module+"/...").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, goFiles, imports := rel(fields[0]), fields[1], fields[2:]
		if goFiles == "0" {
			continue // tests only (this package)
		}
		row, ok := rowOf(layers, pkg)
		require.True(t, ok, "package %s has no row in the layer table of docs/architecture.md", pkg)
		for _, imp := range imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep, ok := rowOf(layers, rel(imp))
			require.True(t, ok, "package %s (imported by %s) has no row in the layer table of docs/architecture.md", rel(imp), pkg)
			if dep.name == row.name {
				continue
			}
			require.Less(t, dep.layer, row.layer,
				"%s (layer %d) imports %s (layer %d): docs/architecture.md lets a package import only lower layers",
				pkg, row.layer, rel(imp), dep.layer)
		}
	}
}

type layerRow struct {
	name  string // a package, or a subtree ending in /...
	layer int
}

// rel is a package's path in the module; the root is "weft".
func rel(path string) string {
	if path == module {
		return "weft"
	}
	return strings.TrimPrefix(path, module+"/")
}

func rowOf(rows []layerRow, pkg string) (layerRow, bool) {
	for _, r := range rows {
		if r.name == pkg {
			return r, true
		}
		if tree, ok := strings.CutSuffix(r.name, "/..."); ok && (pkg == tree || strings.HasPrefix(pkg, tree+"/")) {
			return r, true
		}
	}
	return layerRow{}, false
}

// layerTable reads the rows "| layer | `package` | holds |" of
// architecture.md; rows whose layer is "-" are not Go packages.
func layerTable(t *testing.T) []layerRow {
	f, err := os.Open("architecture.md")
	require.NoError(t, err)
	defer f.Close()
	var rows []layerRow
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "| layer | package |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, "|")
		require.GreaterOrEqual(t, len(cells), 4, "architecture.md:%d: a row of the layer table has three cells", n)
		layer := strings.TrimSpace(cells[1])
		if layer == "-" {
			continue
		}
		l, err := strconv.Atoi(layer)
		require.NoError(t, err, "architecture.md:%d: layer %q is not a number", n, layer)
		name := strings.TrimSpace(cells[2])
		name, _, _ = strings.Cut(strings.Trim(name, "`"), "`")
		rows = append(rows, layerRow{name: name, layer: l})
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, rows, "architecture.md has no layer table")
	return rows
}
