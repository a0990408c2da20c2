package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store/sqlite"
)

// TestMemoryNotCounted: SQLite's allocation statistics are off (settings.go)
// once a store has opened its file and migrated it.
func TestMemoryNotCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.Zero(t, sqlite.MemoryCounted(), "SQLite counts its allocations")
}
