package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/store/postgres"
)

// The program, the Go client and everything a PostgreSQL-only embedding
// needs build without cgo: none of them links the SQLite driver.
func TestBuildsWithoutCgo(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "build", "-o", os.DevNull, "github.com/weftrun/weft/examples/postgres-only", "github.com/weftrun/weft/client")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "CGO_ENABLED=0 build:\n%s", out)
	deps, err := exec.Command("go", "list", "-deps", "github.com/weftrun/weft/examples/postgres-only", "github.com/weftrun/weft/client").Output()
	require.NoError(t, err)
	require.NotContains(t, string(deps), "go-sqlite3")
	require.NotContains(t, string(deps), "weftrun/weft/store/sqlite")
}

func TestRun(t *testing.T) {
	t.Parallel()
	schema := pgtesting.SchemaName("example")
	url := pgtesting.URL(t)
	if strings.Contains(url, "?") {
		url += "&search_path=" + schema
	} else {
		url += "?search_path=" + schema
	}
	t.Cleanup(func() {
		if s, err := postgres.Open(context.Background(), pgtesting.URL(t), postgres.Options{}); err == nil {
			_, _ = s.DB().ExecContext(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
			s.Close()
		}
	})
	got, err := run(context.Background(), url, "Ada")
	require.NoError(t, err)
	require.Equal(t, "hello, Ada!", got)
	_, err = run(context.Background(), "", "Ada")
	require.True(t, err != nil && strings.Contains(err.Error(), "no database"))
}
