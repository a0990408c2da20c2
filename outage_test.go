package weft_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// TestServerDuringPostgresOutage stops PostgreSQL under a serving API while
// a client polls it: during the outage the API answers 503 with the code
// unavailable and a Retry-After header, never 500; once the server is back
// the same process answers 2xx again without being restarted.
func TestServerDuringPostgresOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("stops a PostgreSQL server; skipped with -short")
	}
	if os.Getenv("WEFT_TEST_POSTGRES_URL") == "" || os.Getenv("WEFT_PGTEST_DIR") == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("WEFT_TEST_POSTGRES_URL or WEFT_PGTEST_DIR is not set: scripts/test starts the throwaway PostgreSQL this test needs")
		}
		t.Skip("WEFT_TEST_POSTGRES_URL or WEFT_PGTEST_DIR is not set; run ./scripts/test to start a throwaway PostgreSQL")
	}
	ctx := context.Background()
	pg := startPrivateCluster(t)
	logs := &countingLog{}
	s, err := postgres.Open(ctx, pg.url, postgres.Options{Schema: pgtesting.SchemaName("outage"), MaxConns: 4, Logger: slog.New(logs)})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	e := newEngine(t, s, weft.Config{PollInterval: 50 * time.Millisecond, Logger: slog.New(logs)})
	e.Handle("noop", func(context.Context, *weft.Attempt) (any, error) { return nil, nil })
	require.NoError(t, e.Register(ctx, workflow.New("outage", "one", "1").Step("a", "noop")))
	start(t, e)
	srv, err := server.New(e, server.Options{DisableAuth: true, Logger: slog.New(logs), RetryAfter: 2 * time.Second, RequestTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	sub, err := e.Submit(ctx, weft.Submission{Workflow: "outage/one"})
	require.NoError(t, err)

	type answer struct {
		status     int
		code       string
		retryAfter string
	}
	var mu sync.Mutex
	var answers []answer
	last := func() answer {
		mu.Lock()
		defer mu.Unlock()
		if len(answers) == 0 {
			return answer{}
		}
		return answers[len(answers)-1]
	}
	pollCtx, stopPolling := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for pollCtx.Err() == nil {
			for _, path := range []string{fmt.Sprintf("/v1/tasks/%d", sub.Task.ID), "/v1/tasks?limit=5"} {
				res, err := hs.Client().Get(hs.URL + path)
				if err != nil {
					if pollCtx.Err() == nil {
						t.Errorf("GET %s: %v", path, err)
					}
					return
				}
				var body wire.ErrorBody
				_ = json.NewDecoder(res.Body).Decode(&body)
				res.Body.Close()
				mu.Lock()
				answers = append(answers, answer{res.StatusCode, body.Error.Code, res.Header.Get("Retry-After")})
				mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond) // the client's pace, not a wait for the server
		}
	}()
	t.Cleanup(func() { stopPolling(); <-polled })
	eventually(t, "a 2xx before the outage", func() bool { return last().status == http.StatusOK })
	pg.stop(t)
	eventually(t, "a 503 during the outage", func() bool { return last().status == http.StatusServiceUnavailable })
	pg.start(t)
	eventually(t, "a 2xx after the outage", func() bool { return last().status == http.StatusOK })
	stopPolling()
	<-polled

	mu.Lock()
	defer mu.Unlock()
	seen := map[string]int{}
	for _, a := range answers {
		seen[fmt.Sprintf("%d %s", a.status, a.code)]++
		switch {
		case a.status < 300:
		case a.status == http.StatusServiceUnavailable:
			require.Equal(t, wire.CodeUnavailable, a.code, "answers: %v", seen)
			require.NotEmpty(t, a.retryAfter, "a 503 without Retry-After")
		default:
			t.Fatalf("answered %d %s during a database outage (answers: %v)", a.status, a.code, seen)
		}
	}
	t.Logf("answers: %v", seen)
}
