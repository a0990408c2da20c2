package weftv1_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGeneratedCodeIsCurrent generates the code of proto/ into a temporary
// directory with scripts/protogen and requires the committed files to be
// what it generates, and no more: a .proto changed without
// `scripts/protogen` fails here. It needs protoc (Debian's
// protobuf-compiler and libprotobuf-dev), protoc-gen-go and
// protoc-gen-connect-go (scripts/test installs them), and is skipped
// without them outside CI.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	t.Parallel()
	path := os.Getenv("PATH")
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		path = filepath.Join(strings.TrimSpace(string(out)), "bin") + string(os.PathListSeparator) + path
	}
	for _, tool := range []string{"protoc", "protoc-gen-go", "protoc-gen-connect-go"} {
		if _, err := lookPath(tool, path); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is required in CI to check the generated code (scripts/test installs it)", tool)
			}
			t.Skipf("%s is not installed: cannot check the generated code", tool)
		}
	}
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join("..", "..", "scripts", "protogen"), dir)
	cmd.Env = append(os.Environ(), "PATH="+path)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "scripts/protogen: %s", out)

	want := generatedFiles(t, filepath.Join(dir, "weftv1"))
	got := generatedFiles(t, ".")
	require.NotEmpty(t, want)
	for name := range got {
		_, ok := want[name]
		require.True(t, ok, "%s is generated code no .proto file makes: delete it", name)
	}
	for name, w := range want {
		require.True(t, bytes.Equal(w, got[name]), "%s is not what the .proto files generate: run scripts/protogen", name)
	}
}

// generatedFiles reads the generated Go files under root, by path.
func generatedFiles(t *testing.T, root string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".pb.go") || strings.HasSuffix(p, ".connect.go")) {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[rel] = b
		return nil
	})
	require.NoError(t, err)
	return files
}

func lookPath(name, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return exec.LookPath(name)
}
