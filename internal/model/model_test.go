package model

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/weftproc"
)

// TestModelShortRun runs a short seeded sequence on a real cluster, on
// SQLite and (with WEFT_TEST_POSTGRES_URL) PostgreSQL, with every
// invariant checked.
func TestModelShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of weft processes")
	}
	t.Parallel()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	bin, err := weftproc.Build(t.Context(), root, t.TempDir())
	require.NoError(t, err)
	stores := []struct{ name, db string }{{"sqlite", ""}}
	if url := os.Getenv("WEFT_TEST_POSTGRES_URL"); url != "" {
		stores = append(stores, struct{ name, db string }{"postgres", url})
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			const seed, n = 20261206, 150
			ops := Generate(seed, n)
			res, err := Run(ctx, Config{Store: st.name, DB: st.db, Root: root, Bin: bin, Log: testLog{t}}, ops)
			require.NoError(t, err)
			require.Equal(t, n, res.Ops)
			require.NotZero(t, res.Tasks)
			for _, v := range res.Violations {
				t.Errorf("seed %d: %s", seed, v)
			}
		})
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(p))
	return len(p), nil
}
