package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/dashboard"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// benchTasks is how many tasks BenchmarkPages puts in the database.
const benchTasks = 100_000

// BenchmarkPages measures each dashboard page with 100,000 tasks in the
// database (docs/BENCHMARKS.md):
//
//	go test -run '^$' -bench BenchmarkPages -benchtime 20x ./dashboard/
//
// 90,000 tasks are run to the end (one in twenty fails) across three
// namespaces, so the history and the audit trail are full; 10,000 more
// wait, pending.
func BenchmarkPages(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			s := stores[name](b)
			url, sample := fillForBench(b, s)
			// The overview's reads on their own.
			ctx := context.Background()
			b.Run("store:CountTasksByState", func(b *testing.B) {
				for b.Loop() {
					_, err := s.CountTasksByState(ctx, 100_000, nil)
					require.NoError(b, err)
				}
			})
			b.Run("store:TaskActivity", func(b *testing.B) {
				for b.Loop() {
					_, err := s.TaskActivity(ctx, store.ActivityQuery{Since: time.Now().Add(-time.Hour), Bucket: time.Minute})
					require.NoError(b, err)
				}
			})
			b.Run("store:QueueDepth", func(b *testing.B) {
				for b.Loop() {
					_, err := s.QueueDepth(ctx)
					require.NoError(b, err)
				}
			})
			pages := []string{
				"/", "/?window=24h", "/tasks", "/tasks?state=failed", "/tasks?namespace=ns2", "/tasks?namespace=ns1&workflow=job",
				fmt.Sprintf("/tasks?q=key-%d", benchTasks/2), fmt.Sprintf("/tasks?cursor=%d", benchTasks/2),
				fmt.Sprintf("/tasks?from=%s", time.Now().UTC().Add(-time.Minute).Format("2006-01-02T15:04")),
				fmt.Sprintf("/tasks/%d", sample), "/workflows", "/workflows/ns0/job", "/workers",
				"/attention", "/schedules", "/namespaces", "/tasks?tag=env%3Dbench", "/tasks?namespace=ns0&workflow=job&schedule=nightly",
			}
			for _, p := range pages {
				b.Run(p, func(b *testing.B) {
					for b.Loop() {
						res, err := http.Get(url + p)
						if err != nil {
							b.Fatal(err)
						}
						_, _ = io.Copy(io.Discard, res.Body)
						res.Body.Close()
						if res.StatusCode != http.StatusOK {
							b.Fatalf("%s: %s", p, res.Status)
						}
					}
				})
			}
		})
	}
}

var errBench = errors.New("one in twenty fails")

// fillForBench fills the store and serves it; it returns the URL and the
// id of a finished task.
func fillForBench(b *testing.B, s store.Store) (string, int64) {
	b.Helper()
	ctx := context.Background()
	en, err := weft.New(s, weft.Config{Logger: quietLogger(), Concurrency: 32})
	require.NoError(b, err)
	for i := range 3 {
		require.NoError(b, en.Register(ctx, workflow.New(fmt.Sprintf("ns%d", i), "job", "1").Step("work", "bench.work")))
	}
	en.Handle("bench.work", func(ctx context.Context, a *weft.Attempt) (any, error) {
		if a.TaskID%20 == 0 {
			return nil, weft.Permanent(errBench)
		}
		return map[string]int64{"task": a.TaskID}, nil
	})
	submit := func(from, to int) {
		const batch = 1000
		for i := from; i < to; i += batch {
			subs := make([]weft.Submission, 0, batch)
			for j := i; j < min(i+batch, to); j++ {
				subs = append(subs, weft.Submission{Workflow: fmt.Sprintf("ns%d/job", j%3), Input: map[string]int{"n": j}, Key: fmt.Sprintf("key-%d", j)})
			}
			_, err := en.SubmitMany(ctx, subs)
			require.NoError(b, err)
		}
	}
	submit(0, benchTasks*9/10)
	require.NoError(b, en.Start(ctx))
	deadline := time.Now().Add(10 * time.Minute)
	for {
		counts, err := en.Stats().CountTasksByState(ctx, 1, nil)
		require.NoError(b, err)
		busy := false
		for _, c := range counts {
			if (c.State == state.TaskPending || c.State == state.TaskRunning) && c.Count > 0 {
				busy = true
			}
		}
		if !busy {
			break
		}
		require.False(b, time.Now().After(deadline), "the benchmark's tasks did not finish")
		time.Sleep(200 * time.Millisecond)
	}
	require.NoError(b, en.Stop(ctx))
	submit(benchTasks*9/10, benchTasks)
	srv, err := server.New(en, server.Options{DisableAuth: true, Logger: quietLogger(), UI: dashboard.New})
	require.NoError(b, err)
	hs := httptest.NewServer(srv)
	b.Cleanup(func() { srv.Close(); hs.Close() })
	return hs.URL, benchTasks / 3
}

// BenchmarkTaskPage measures a task's page for a batch of 50, 1,000 and
// 10,000 items, and reports its size (bytes/page):
//
//	go test -run '^$' -bench BenchmarkTaskPage -benchtime 5x ./dashboard/
func BenchmarkTaskPage(b *testing.B) {
	for _, n := range []int{50, 1000, 10_000} {
		b.Run(fmt.Sprintf("steps=%d", n+3), func(b *testing.B) {
			en := newEnv(b, stores["sqlite"](b), server.Options{DisableAuth: true})
			id := submitBatch(b, en, n, 7)
			for _, q := range []string{"", "?fragment=1"} {
				b.Run("page"+q, func(b *testing.B) {
					size := 0
					for b.Loop() {
						res, err := http.Get(fmt.Sprintf("%s/tasks/%d%s", en.url, id, q))
						if err != nil {
							b.Fatal(err)
						}
						body, _ := io.ReadAll(res.Body)
						res.Body.Close()
						if res.StatusCode != http.StatusOK {
							b.Fatalf("%s", res.Status)
						}
						size = len(body)
					}
					b.ReportMetric(float64(size), "bytes/page")
				})
			}
		})
	}
}
