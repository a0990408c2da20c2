package weft_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/metrics"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// TestRateLimitsDefer runs a step limited to two claims an hour per
// customer and a namespace limited to one an hour: what finds no token
// waits, without using an attempt, and each deferral is published and
// counted in the metrics by rate.
func TestRateLimitsDefer(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{Concurrency: 8})
		var mu sync.Mutex
		ran := map[string]int{}
		e.Handle("send", func(ctx context.Context, a *weft.Attempt) (any, error) {
			var in struct{ Customer string }
			if err := a.Bind(&in); err != nil {
				return nil, weft.Permanent(err)
			}
			mu.Lock()
			ran[in.Customer]++
			mu.Unlock()
			return nil, nil
		})
		var deferred sync.Map
		unsubscribe := e.Subscribe(func(ev weft.Event) {
			if ev.Kind == weft.EventRateDeferred {
				n, _ := deferred.LoadOrStore(ev.Namespace+"/"+ev.Workflow+"/"+ev.Step, new(int64))
				mu.Lock()
				*n.(*int64) += int64(ev.Count)
				mu.Unlock()
			}
		})
		defer unsubscribe()
		m := metrics.New(e, slog.New(slog.NewTextHandler(io.Discard, nil)))
		defer m.Close()
		register(t, e, workflow.New("shop", "mail", "1").
			Step("send", "send", workflow.WithRateLimit(2, time.Hour, "input.customer")))
		register(t, e, workflow.New("news", "mail", "1").Step("send", "send"))
		_, err := e.SetLimits(t.Context(), "news", weft.Limits{Rate: &weft.Rate{Limit: 1, Per: time.Hour}}, weft.Operator{Actor: "test"})
		require.NoError(t, err)
		var ids []int64
		for _, c := range []string{"ada", "ada", "ada", "bob"} {
			ids = append(ids, submit(t, e, weft.Submission{Workflow: "shop/mail", Input: map[string]string{"customer": c}}).Task.ID)
		}
		for range 2 {
			ids = append(ids, submit(t, e, weft.Submission{Workflow: "news/mail", Input: map[string]string{"customer": "all"}}).Task.ID)
		}
		_, err = e.Submit(t.Context(), weft.Submission{Workflow: "shop/mail", Input: map[string]int{"amount": 1}})
		require.ErrorIs(t, err, weft.ErrInvalid, "a task whose rate key cannot be computed is refused")
		start(t, e)
		eventually(t, "the tokens used, the rest deferred", func() bool {
			mu.Lock()
			defer mu.Unlock()
			_, shop := deferred.Load("shop/mail/send")
			_, news := deferred.Load("news//")
			return ran["ada"] == 2 && ran["bob"] == 1 && ran["all"] == 1 && shop && news
		})
		waiting := 0
		for _, id := range ids {
			task, err := e.Get(t.Context(), id)
			require.NoError(t, err)
			if st := task.Steps[0]; st.State == state.StepWaiting {
				waiting++
				require.Zero(t, st.Attempts, "a deferral uses no attempt")
				require.NotNil(t, st.RunAt)
				// when the next token exists: half an hour for ada (2/h),
				// an hour for the namespace (1/h)
				require.True(t, st.RunAt.After(time.Now().Add(25*time.Minute)) && st.RunAt.Before(time.Now().Add(61*time.Minute)), st.RunAt)
			}
		}
		require.Equal(t, 2, waiting)

		rep, err := e.Policies(t.Context())
		require.NoError(t, err)
		require.Len(t, rep.Policies, 1)
		require.Equal(t, "1/h", rep.Policies[0].Rate.String())
		keys := []string{}
		for _, r := range rep.Rates {
			keys = append(keys, r.Key)
		}
		require.Equal(t, []string{"step:shop/mail/send=ada", "step:shop/mail/send=bob"}, keys)

		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		require.Contains(t, rec.Body.String(), `weft_rate_deferrals_total{namespace="shop",step="send",workflow="mail"} 1`)
		require.Contains(t, rec.Body.String(), `weft_rate_deferrals_total{namespace="news",step="",workflow=""} 1`)
	})
}
