package metrics

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/workflow"
)

func TestStepLabel(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, want string }{
		{"charge", "charge"},
		{"fan[0]", "fan"},
		{"fan[1234]", "fan"},
		{"[odd]", "[odd]"},
		{"a]", "a]"},
	} {
		require.Equal(t, tt.want, stepLabel(tt.name), tt.name)
	}
}

// TestQueueDepthReadsZero: a namespace with a registered workflow has its
// four series at 0 before any task, counts a task's steps while they wait,
// and reads 0 again (not absent) once they are gone.
func TestQueueDepthReadsZero(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, e, m := shopMetrics(t)
	t.Cleanup(func() { s.Close() })
	zero := map[string]float64{
		`weft_queue_depth{namespace="shop"}{state="pending"}`: 0,
		`weft_queue_depth{namespace="shop"}{state="ready"}`:   0,
		`weft_queue_depth{namespace="shop"}{state="running"}`: 0,
		`weft_queue_depth{namespace="shop"}{state="waiting"}`: 0,
	}
	require.Equal(t, zero, gaugesOf(t, m, "weft_queue_depth"))

	res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/order"})
	require.NoError(t, err)
	got := gaugesOf(t, m, "weft_queue_depth")
	require.Equal(t, float64(1), got[`weft_queue_depth{namespace="shop"}{state="ready"}`])
	require.Len(t, got, 4)

	require.NoError(t, e.Cancel(ctx, res.Task.ID))
	require.Equal(t, zero, gaugesOf(t, m, "weft_queue_depth"))
}

// TestScrapeWithTheDatabaseDown: a scrape while the database cannot be
// read answers 200 with every metric that does not need it, rather than
// 500 with none.
func TestScrapeWithTheDatabaseDown(t *testing.T) {
	t.Parallel()
	s, _, m := shopMetrics(t)
	require.NoError(t, s.Close()) // every read fails from now on
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "weft_lease_expiries_total")
	require.NotContains(t, rec.Body.String(), "weft_queue_depth{")
}

// shopMetrics returns a SQLite store, for the caller to close, an engine
// on it (not started) with the workflow shop/order registered, and the
// engine's metrics.
func shopMetrics(t *testing.T) (sqlite.Store, *weft.Engine, *Metrics) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := weft.New(s, weft.Config{Logger: log})
	require.NoError(t, err)
	require.NoError(t, e.Register(ctx, workflow.New("shop", "order", "1").Step("pay", "nobody.pay")))
	m := New(e, log)
	t.Cleanup(m.Close)
	return s, e, m
}
