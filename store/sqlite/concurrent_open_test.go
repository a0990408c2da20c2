package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/sqlstore"
)

// TestConcurrentOpenOfNewFile opens a new database file from many stores at
// once (each its own sql.DB and connections, as separate processes would),
// 20 times: every open succeeds and the schema ends at the newest version,
// each migration recorded once.
func TestConcurrentOpenOfNewFile(t *testing.T) {
	t.Parallel()
	const (
		tries   = 20
		openers = 8
	)
	ms, err := sqlstore.LoadMigrations(migrations, "migrations")
	require.NoError(t, err)
	for try := range tries {
		t.Run(fmt.Sprint(try), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "new.db")
			start := make(chan struct{})
			errs := make([]error, openers)
			var wg sync.WaitGroup
			for i := range openers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					s, err := Open(ctx, path, Options{})
					if err == nil {
						err = s.Close()
					}
					errs[i] = err
				}()
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "opener %d", i)
			}
			s, err := Open(ctx, path, Options{})
			require.NoError(t, err)
			defer s.Close()
			var n, newest int
			require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*), max(version) FROM weft_schema`).Scan(&n, &newest))
			require.Equal(t, len(ms), newest)
			require.Equal(t, len(ms), n, "each migration is recorded once")
		})
	}
}
