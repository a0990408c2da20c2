package weft_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/workflow"
)

// heldStep is a running handler that waits for the test to end it.
type heldStep struct {
	namespace string
	done      chan struct{}
}

// TestFairSharesTwoEngines: two engines on one PostgreSQL database (each
// with its own pool, as two processes), 4 slots each, a backlog in two
// namespaces weighted 3:1. Steps end oldest first whenever all 8 slots are
// busy, so every step takes as long as any other: the steps started are
// shared 3:1 across both engines.
func TestFairSharesTwoEngines(t *testing.T) {
	t.Parallel()
	url := pgtesting.URL(t)
	ctx := context.Background()
	schema := pgtesting.SchemaName("fair")
	openStore := func() store.Store {
		s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, MaxConns: 4, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	first := openStore()
	t.Cleanup(func() { _, _ = first.(postgres.Store).DB().ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`) })

	started := make(chan heldStep)
	finished := make(chan struct{}) // the count is done: handlers end at once
	handler := func(ctx context.Context, a *weft.Attempt) (any, error) {
		ns, _, _ := strings.Cut(a.Workflow, "/")
		h := heldStep{namespace: ns, done: make(chan struct{})}
		select {
		case started <- h:
		case <-finished:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case <-h.done:
		case <-finished:
		case <-ctx.Done():
		}
		return nil, nil
	}
	engines := []*weft.Engine{newEngine(t, first, weft.Config{Concurrency: 4}), newEngine(t, openStore(), weft.Config{Concurrency: 4})}
	for _, e := range engines {
		e.Handle("h", handler)
	}
	register(t, engines[0], workflow.New("shop", "w", "1").Step("s", "h"))
	register(t, engines[0], workflow.New("reports", "w", "1").Step("s", "h"))
	var subs []weft.Submission
	for range 150 {
		subs = append(subs, weft.Submission{Workflow: "shop/w"}, weft.Submission{Workflow: "reports/w"})
	}
	_, err := engines[0].SubmitMany(ctx, subs)
	require.NoError(t, err)
	three := 3
	_, err = engines[1].SetLimits(ctx, "shop", weft.Limits{Weight: &three}, weft.Operator{Actor: "test"})
	require.NoError(t, err)
	for _, e := range engines {
		start(t, e)
	}

	const slots, count = 8, 160
	got := map[string]int{}
	var running []heldStep
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for n := 0; n < count; n++ {
		select {
		case h := <-started:
			got[h.namespace]++
			running = append(running, h)
		case <-timeout.C:
			t.Fatalf("after %d steps started (%v), no other started", n, got)
		}
		if len(running) == slots {
			close(running[0].done)
			running = running[1:]
		}
	}
	close(finished)
	// Within 10% of the ideal: 120 and 40 of 160.
	require.InDelta(t, 120, got["shop"], 12, "%v", got)
	require.InDelta(t, 40, got["reports"], 4, "%v", got)
}
