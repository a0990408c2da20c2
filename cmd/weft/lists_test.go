package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEmptyListsAreArrays: every command that lists prints an empty JSON
// array with --json on a database that holds none of what it lists (never
// null), and without --json says so on stderr, with nothing on stdout.
func TestEmptyListsAreArrays(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "weft.db")
	requireCode(t, 0, weftCLI(t, "migrate", "--db", db))
	for _, args := range [][]string{
		{"tasks"},
		{"keys", "list"},
		{"policies", "--history"},
		{"retention"},
		{"schedules"},
		{"webhooks", "list"},
		{"workers"},
		{"oplog"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			r := weftCLI(t, append(args, "--db", db, "--json")...)
			requireCode(t, 0, r)
			require.Equal(t, "[]\n", r.stdout)
			r = weftCLI(t, append(args, "--db", db)...)
			requireCode(t, 0, r)
			require.Empty(t, r.stdout)
			require.NotEmpty(t, r.stderr, "an empty list says so")
		})
	}
}
