package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadOnlyMedia: the read commands work on a database in a directory
// the process cannot write (a read-only mount, a backup), where SQLite
// cannot create the file's shared-memory index. As root, which writes
// anywhere, the command runs as nobody.
func TestReadOnlyMedia(t *testing.T) {
	t.Parallel()
	bin, err := buildWeft()
	require.NoError(t, err)
	base, err := os.MkdirTemp("", "weft-ro-")
	require.NoError(t, err)
	ro := filepath.Join(base, "ro")
	db := filepath.Join(ro, "weft.db")
	require.NoError(t, os.Mkdir(ro, 0o755))
	requireCode(t, 0, weftCLI(t, "--db", db, "submit", "../../examples/hello.yaml"))
	// A clean close leaves no -wal or -shm file beside it.
	for _, p := range []string{db + "-wal", db + "-shm"} {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist, p)
	}
	require.NoError(t, os.Chmod(db, 0o444))
	require.NoError(t, os.Chmod(ro, 0o555))
	require.NoError(t, os.Chmod(base, 0o755))
	t.Cleanup(func() {
		_ = os.Chmod(ro, 0o755)
		_ = os.RemoveAll(base)
	})
	var cmd *exec.Cmd
	if os.Getuid() == 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("running as root without setpriv: cannot run the command as a user the directory refuses")
		}
		cmd = exec.Command(setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", bin, "--db", db, "tasks")
	} else {
		cmd = exec.Command(bin, "--db", db, "tasks")
	}
	cmd.Dir = base
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "examples/hello@1")
}
