package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Commands that only read open the database read-only, so they work on a
// file the process cannot write (here a read-only bind mount, which holds
// even for root); a command that writes says why it cannot.
func TestReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	requireCode(t, 0, weftCLI(t, "--db", db, "submit", filepath.Join("..", "..", "examples", "hello.yaml"), "--input", `{"name":"Ada"}`))
	if out, err := exec.Command("mount", "--bind", dir, dir).CombinedOutput(); err != nil {
		t.Skipf("a read-only bind mount needs root: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	out, err := exec.Command("mount", "-o", "remount,ro,bind", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)

	r := weftCLI(t, "--db", db, "tasks")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "examples/hello@1")
	r = weftCLI(t, "--db", db, "task", "1")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "pending")

	r = weftCLI(t, "--db", db, "cancel", "1")
	requireCode(t, 1, r)
	require.Contains(t, r.stderr, "cannot be opened for writing")
}
