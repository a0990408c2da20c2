package weft_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// eventLog collects events from a subscription.
type eventLog struct {
	mu     sync.Mutex
	events []weft.Event
}

func (l *eventLog) add(ev weft.Event) { l.mu.Lock(); l.events = append(l.events, ev); l.mu.Unlock() }

func (l *eventLog) count(kind weft.EventKind, outcome string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ev := range l.events {
		if ev.Kind == kind && (outcome == "" || ev.Outcome == outcome) {
			n++
		}
	}
	return n
}

func TestSubscribeSeesLifecycle(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		var log eventLog
		unsubscribe := e.Subscribe(log.add)
		calls := 0
		var mu sync.Mutex
		e.Handle("flaky", func(ctx context.Context, a *weft.Attempt) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls == 1 {
				return nil, weft.RetryAfter(time.Millisecond, errors.New("first time"))
			}
			return "ok", nil
		})
		e.Handle("ok", func(ctx context.Context, a *weft.Attempt) (any, error) { return 1, nil })
		require.NoError(t, e.Register(context.Background(), workflow.New("ev", "wf", "1").
			Step("a", "flaky").Step("b", "ok", workflow.DependsOn("a"))))
		start(t, e)
		res := submit(t, e, weft.Submission{Workflow: "ev/wf", Key: "k"})
		submit(t, e, weft.Submission{Workflow: "ev/wf", Key: "k"}) // a duplicate publishes nothing
		require.Equal(t, state.TaskCompleted, wait(t, e, res.Task.ID).State)
		eventually(t, "the last step's end", func() bool { return log.count(weft.EventStepEnded, weft.OutcomeCompleted) == 2 })
		require.Equal(t, 1, log.count(weft.EventSubmitted, ""))
		require.Equal(t, 3, log.count(weft.EventClaimed, ""))
		require.Equal(t, 1, log.count(weft.EventStepEnded, weft.OutcomeRetry))
		log.mu.Lock()
		for _, ev := range log.events {
			if ev.Kind == weft.EventStepEnded {
				require.Equal(t, "ev", ev.Namespace)
				require.Equal(t, res.Task.ID, ev.TaskID)
				require.False(t, ev.At.IsZero())
			}
		}
		log.mu.Unlock()

		unsubscribe()
		before := log.count(weft.EventSubmitted, "")
		res = submit(t, e, weft.Submission{Workflow: "ev/wf"})
		wait(t, e, res.Task.ID)
		require.Equal(t, before, log.count(weft.EventSubmitted, ""), "no events after unsubscribing")
	})
}
