package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVersionPrintsCommit: weft built from a git checkout prints the
// commit it was built from. Go stamps the VCS revision only in a
// repository's own directory, not in a git worktree (whose .git is a
// file): there the test says so and skips.
func TestVersionPrintsCommit(t *testing.T) {
	t.Parallel()
	head := git(t, ".", "rev-parse", "HEAD")
	if fi, err := os.Stat(filepath.Join(git(t, ".", "rev-parse", "--show-toplevel"), ".git")); err != nil || !fi.IsDir() {
		t.Skip("a git worktree: Go does not stamp VCS information here (TestVersionOfAGitBuild covers a real build)")
	}
	bin, err := buildWeft()
	require.NoError(t, err)
	out, err := exec.Command(bin, "version").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "(commit "+head)
	require.Regexp(t, `^weft \S+.* go1\.\d+`, string(out))

	out, err = exec.Command(bin, "version", "--json").Output()
	require.NoError(t, err)
	require.Contains(t, string(out), `"revision": "`+head+`"`)
}

// TestVersionOfAGitBuild builds a program that prints weft.ReadBuild()
// in a fresh git repository and checks that it shows that repository's
// commit and time: what `weft version` prints, from a real build.
func TestVersionOfAGitBuild(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	dir := t.TempDir()
	writeFile(t, dir, "go.mod", "module example.com/versioned\n\ngo 1.26\n\nrequire github.com/weftrun/weft v0.0.0\n\nreplace github.com/weftrun/weft => "+root+"\n")
	writeFile(t, dir, "go.sum", string(sum))
	writeFile(t, dir, "main.go", "package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/weftrun/weft\"\n)\n\nfunc main() { fmt.Println(weft.ReadBuild()) }\n")
	bin := filepath.Join(t.TempDir(), "versioned")
	build := func(flags ...string) {
		cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", bin, ".")...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	// A first build settles go.mod and go.sum, so the commit is clean.
	build("-mod=mod", "-buildvcs=false")
	git(t, dir, "init", "-q")
	git(t, dir, "add", ".")
	git(t, dir, "-c", "user.name=weft", "-c", "user.email=weft@example.com", "commit", "-q", "-m", "versioned")
	head := git(t, dir, "rev-parse", "HEAD")
	build("-buildvcs=true")
	out, err := exec.Command(bin).Output()
	require.NoError(t, err)
	require.Regexp(t, `^weft .+ \(commit `+head+`, \d{4}-\d\d-\d\dT[0-9:]+Z\) go1\.\d+`, string(out))
	require.NotContains(t, string(out), "modified")
}

// git runs git in dir and returns its trimmed output; the test skips when
// git is missing or dir is not in a repository.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}
