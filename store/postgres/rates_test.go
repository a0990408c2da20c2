package postgres_test

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
)

// TestRateExactAcrossProcesses: two stores on one database, as two engine
// processes, claim at the same instant, over and over, steps under a rate
// of 5 an hour: 5 are claimed in all, and every other step is deferred to
// a time of its own, one token interval (12 minutes) after the other, so
// that the waiting steps wake as their tokens come.
func TestRateExactAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtesting.URL(t)
	schema := pgtesting.SchemaName("rates")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func() postgres.Store {
		s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, MaxConns: 4, Logger: quiet})
		require.NoError(t, err)
		return s
	}
	a, b := open(), open()
	t.Cleanup(func() {
		_, _ = a.DB().ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`)
		a.Close()
		b.Close()
	})
	rate := store.Rate{Limit: 5, Per: time.Hour}
	var ids []int64
	for range 30 {
		res, err := a.InsertTasks(ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1",
			Steps: []store.StepInsert{{Name: "call", Handler: "h", MaxAttempts: 1, RateKey: "step:ns/wf/call", Rate: rate}}}})
		require.NoError(t, err)
		ids = append(ids, res[0].Task.ID)
	}
	now := time.Now().Truncate(time.Second)
	var mu sync.Mutex
	claimed := 0
	var wg sync.WaitGroup
	for i, s := range []postgres.Store{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 6 {
				got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "", Limit: 3, Now: now})
				if err != nil {
					t.Errorf("claimer %d: %v", i, err)
					return
				}
				mu.Lock()
				claimed += len(got)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 5, claimed, "the burst is the limit, across processes")
	var runAts []time.Duration
	for _, id := range ids {
		task, err := b.GetTask(ctx, id)
		require.NoError(t, err)
		st := task.Steps[0]
		if st.State == state.StepWaiting {
			require.Zero(t, st.Attempts)
			runAts = append(runAts, st.RunAt.Sub(now))
		}
	}
	require.Len(t, runAts, 25)
	sort.Slice(runAts, func(i, j int) bool { return runAts[i] < runAts[j] })
	for i, d := range runAts {
		require.Equal(t, time.Duration(i+1)*12*time.Minute, d, "deferral %d", i)
	}
}
