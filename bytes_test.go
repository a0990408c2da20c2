package weft_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// requireStorable fails on what keeps a step's text from a text or jsonb
// column of PostgreSQL: a NUL byte, bytes that are not UTF-8 or, in JSON, a
// \u0000 escape.
func requireStorable(t *testing.T, what, s string, isJSON bool) {
	t.Helper()
	require.True(t, utf8.ValidString(s), "%s is not UTF-8: %q", what, s)
	require.NotContains(t, s, "\x00", "%s holds a NUL byte", what)
	if isJSON {
		require.NotContains(t, s, `\u0000`, "%s holds a \\u0000 escape", what)
	}
}

// TestBadBytesInOutcomes: handlers and commands that produce NUL bytes or
// bytes that are not UTF-8 end their steps (with the text sanitized, or
// failed with a clear error), the good steps around them complete, and the
// engine still stops promptly: one bad outcome must not wedge the completer.
func TestBadBytesInOutcomes(t *testing.T) {
	t.Parallel()
	type want struct {
		state  state.Step
		result any    // the decoded result, when completed
		error  string // a substring of the error, when failed
	}
	steps := []struct {
		name    string
		handler string
		config  map[string]any
		want    want
	}{
		{"good", "good", nil, want{state: state.StepCompleted, result: "ok"}},
		{"go_nul_result", "nul_result", nil, want{state: state.StepFailed, error: "result cannot be stored"}},
		{"go_raw_not_utf8", "raw_not_utf8", nil, want{state: state.StepCompleted, result: "a\uFFFDb"}},
		{"go_bad_error", "bad_error", nil, want{state: state.StepFailed, error: "bad \uFFFD error \uFFFD"}},
		{"exec_stderr_nul", "exec", map[string]any{"command": []string{"sh", "-c", `printf 'err\000or' >&2; exit 3`},
			"permanent_exit_codes": []int{3}}, want{state: state.StepFailed, error: "err\uFFFDor"}},
		{"exec_stdout_not_utf8", "exec", map[string]any{"command": []string{"sh", "-c", `printf '\377out'`}},
			want{state: state.StepCompleted, result: map[string]any{"stdout": "\uFFFDout"}}},
		{"exec_stdout_nul", "exec", map[string]any{"command": []string{"sh", "-c", `printf 'a\000b'`}},
			want{state: state.StepCompleted, result: map[string]any{"stdout": "a\uFFFDb"}}},
		{"exec_json_not_utf8", "exec", map[string]any{"command": []string{"sh", "-c", `printf '{"v":"\377"}'`}},
			want{state: state.StepCompleted, result: map[string]any{"v": "\uFFFD"}}},
		{"exec_json_nul", "exec", map[string]any{"command": []string{"sh", "-c", `printf '{"v":"a\\u0000b"}'`}},
			want{state: state.StepFailed, error: "result cannot be stored"}},
		{"good_exec", "exec", map[string]any{"command": []string{"sh", "-c", `printf '{"n":1}'`}},
			want{state: state.StepCompleted, result: map[string]any{"n": float64(1)}}},
	}
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{Concurrency: 64})
		e.Handle("good", func(ctx context.Context, a *weft.Attempt) (any, error) { return "ok", nil })
		e.Handle("nul_result", func(ctx context.Context, a *weft.Attempt) (any, error) { return "a\x00b", nil })
		e.Handle("raw_not_utf8", func(ctx context.Context, a *weft.Attempt) (any, error) {
			return json.RawMessage("\"a\xffb\""), nil
		})
		e.Handle("bad_error", func(ctx context.Context, a *weft.Attempt) (any, error) {
			return nil, weft.Permanent(errors.New("bad \x00 error \xff"))
		})
		b := workflow.New("test", "bytes", "1")
		for _, s := range steps {
			opts := []workflow.StepOption{workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 1})}
			if s.config != nil {
				opts = append(opts, workflow.WithConfig(s.config))
			}
			b = b.Step(s.name, s.handler, opts...)
		}
		register(t, e, b)
		require.NoError(t, e.Start(context.Background()))
		stopped := false
		t.Cleanup(func() {
			if !stopped {
				_ = e.Stop(context.Background())
			}
		})

		const tasks = 4
		ids := make([]int64, tasks)
		for i := range ids {
			ids[i] = submit(t, e, weft.Submission{Workflow: "test/bytes", Input: map[string]int{"n": i}}).Task.ID
		}
		for _, id := range ids {
			task := wait(t, e, id)
			require.Equal(t, state.TaskFailed, task.State)
			for _, s := range steps {
				got := stepByName(t, task, s.name)
				requireStorable(t, s.name+" error", got.Error, false)
				requireStorable(t, s.name+" result", string(got.Result), true)
				require.Equal(t, s.want.state, got.State, "step %s: %s", s.name, got.Error)
				if s.want.state == state.StepCompleted {
					var v any
					require.NoError(t, json.Unmarshal(got.Result, &v))
					require.Equal(t, s.want.result, v, s.name)
				} else {
					require.Contains(t, got.Error, s.want.error, s.name)
				}
			}
		}

		// A wedged completer would hold Stop until its deadline, which
		// Stop then reports; a loaded machine may take its time.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, e.Stop(ctx), "Stop did not drain: the completer is wedged")
		stopped = true
	})
}

// refusingStore refuses, as a database refuses a row it cannot store, any
// batch of outcomes that holds one whose result contains poison, and fails
// the first transient writes with a passing error.
type refusingStore struct {
	store.Store
	mu        sync.Mutex
	transient int // passing failures still to give
	calls     int
}

const poison = "poison"

func (s *refusingStore) CompleteSteps(ctx context.Context, outcomes []store.Outcome) ([]error, error) {
	s.mu.Lock()
	s.calls++
	if s.transient > 0 {
		s.transient--
		s.mu.Unlock()
		return nil, errors.New("connection reset by peer")
	}
	s.mu.Unlock()
	for _, o := range outcomes {
		if strings.Contains(string(o.Result), poison) {
			return nil, fmt.Errorf("record outcome of step %d: %w", o.Fence.StepID,
				fmt.Errorf("%w: ERROR: invalid byte sequence (SQLSTATE 22021)", store.ErrRefused))
		}
	}
	return s.Store.CompleteSteps(ctx, outcomes)
}

// TestRefusedOutcomeIsSplitOut: when the database refuses a batch of
// outcomes for one row's data, the other rows land, the bad row's step
// fails with "outcome could not be stored", nothing is retried forever, and
// passing errors are still retried.
func TestRefusedOutcomeIsSplitOut(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		s := &refusingStore{Store: open(t), transient: 2}
		// A lease that outlasts a loaded machine: the handlers hold until
		// all 24 have started, and no lease may lapse meanwhile.
		e := newEngine(t, s, weft.Config{Concurrency: 64, LeaseTTL: time.Minute})
		release := make(chan struct{})
		var started sync.WaitGroup
		const width = 24
		started.Add(width)
		e.Handle("h", func(ctx context.Context, a *weft.Attempt) (any, error) {
			started.Done()
			// All finish together, so their outcomes share batches.
			if err := hold(ctx, release); err != nil {
				return nil, err
			}
			if a.Step == "s7" {
				return poison, nil
			}
			return "ok", nil
		})
		b := workflow.New("test", "refused", "1")
		for i := range width {
			b = b.Step(fmt.Sprintf("s%d", i), "h", workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 1}))
		}
		register(t, e, b)
		require.NoError(t, e.Start(context.Background()))
		id := submit(t, e, weft.Submission{Workflow: "test/refused"}).Task.ID
		started.Wait()
		close(release)
		task := wait(t, e, id)
		require.Equal(t, state.TaskFailed, task.State)
		for i := range width {
			got := stepByName(t, task, fmt.Sprintf("s%d", i))
			if i == 7 {
				require.Equal(t, state.StepFailed, got.State)
				require.Contains(t, got.Error, "outcome could not be stored")
				require.Contains(t, got.Error, "22021")
				continue
			}
			require.Equal(t, state.StepCompleted, got.State, "%s: %s", got.Name, got.Error)
		}
		// A wedged completer would hold Stop until its deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, e.Stop(ctx), "Stop did not drain: the completer is wedged")
	})
}
