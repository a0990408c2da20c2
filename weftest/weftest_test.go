package weftest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/weftest"
	"github.com/weftrun/weft/workflow"
)

// fakeT is a TestingT that records failures instead of ending the test, so
// that tests can check that weftest fails, and what it says, when it
// should. Its TempDir and Cleanup are the real test's.
type fakeT struct {
	*testing.T
	mu     sync.Mutex
	fatals []string
	errors []string
	logs   []string
}

func newFakeT(t *testing.T) *fakeT { return &fakeT{T: t} }

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
}

func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeT) Logf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

// failures returns what Fatalf and Errorf recorded.
func (f *fakeT) failures() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append(append([]string(nil), f.fatals...), f.errors...)
}

// requireFailedWith checks that exactly one failure was recorded and that
// it contains every one of want.
func requireFailedWith(t *testing.T, f *fakeT, want ...string) {
	t.Helper()
	got := f.failures()
	require.Len(t, got, 1, "want exactly one failure, got %q", got)
	for _, w := range want {
		require.Contains(t, got[0], w)
	}
}

// shop registers the handlers of the checkout workflow on h: "charge"
// fails its first attempts as the input says, "notify" echoes its
// dependency's result.
func shop(h *weftest.Harness) *workflow.Workflow {
	h.Handle("shop.charge", weft.Typed(func(ctx context.Context, a *weft.Attempt, in struct {
		Cents, FailFirst int
		Decline          bool
	}) (map[string]any, error) {
		switch {
		case in.Decline:
			return nil, weft.Permanent(errors.New("card declined"))
		case a.Number <= in.FailFirst:
			return nil, fmt.Errorf("gateway busy (attempt %d)", a.Number)
		}
		return map[string]any{"ok": true, "cents": in.Cents}, nil
	}))
	h.Handle("shop.notify", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var charge map[string]any
		if err := a.Dep("charge", &charge); err != nil {
			return nil, err
		}
		return fmt.Sprintf("charged %v cents", charge["cents"]), nil
	})
	h.Handle("shop.refund", func(ctx context.Context, a *weft.Attempt) (any, error) { return "refunded", nil })
	// Not shorter: a retry whose delay has passed by the time its failure
	// is recorded goes straight back to ready, and "retries" checks that
	// charge waited.
	fast := workflow.RetryPolicy{MaxAttempts: 3, Backoff: "fixed", Initial: workflow.Duration(30 * time.Millisecond)}
	return h.Register(workflow.New("shop", "checkout", "1").
		Step("charge", "shop.charge", workflow.WithRetry(fast)).
		Step("notify", "shop.notify", workflow.DependsOn("charge")).
		Step("refund", "shop.refund", workflow.DependsOn("charge"), workflow.WithTriggerRule(workflow.OneFailed)))
}

func TestRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input map[string]any
		check func(t *testing.T, res *weftest.Result)
	}{
		{
			name:  "completes",
			input: map[string]any{"cents": 600},
			check: func(t *testing.T, res *weftest.Result) {
				res.RequireCompleted(t)
				res.RequireStep(t, "charge").Completed().Attempts(1).ResultJSON(`{"cents": 600, "ok": true}`)
				res.RequireStep(t, "notify").Completed().ResultJSON(`"charged 600 cents"`)
				res.RequireStep(t, "refund").Skipped()
				res.RequireTaskTransition(t, state.TaskRunning, state.TaskCompleted)
			},
		},
		{
			name:  "retries",
			input: map[string]any{"cents": 5, "failFirst": 2},
			check: func(t *testing.T, res *weftest.Result) {
				res.RequireCompleted(t)
				res.RequireStep(t, "charge").Completed().Attempts(3).
					Transition(state.StepRunning, state.StepWaiting).
					Transition(state.StepWaiting, state.StepReady)
				require.Contains(t, res.Transitions("charge"), "running -> waiting (retry scheduled: gateway busy (attempt 2))")
			},
		},
		{
			name:  "fails",
			input: map[string]any{"decline": true},
			check: func(t *testing.T, res *weftest.Result) {
				res.RequireState(t, state.TaskFailed)
				res.RequireStep(t, "charge").Failed().Attempts(1).ErrorContains("card declined")
				res.RequireStep(t, "notify").Skipped()
				res.RequireStep(t, "refund").Completed().ResultJSON(`"refunded"`)
				require.Equal(t, "shop/checkout@1 failed", strings.SplitN(res.String(), "\n", 2)[0])
				require.Contains(t, res.String(), `(dependency "charge" failed)`)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := weftest.New(t) // a harness fails the test that made it: one per subtest
			shop(h)
			tt.check(t, h.Run(context.Background(), "shop/checkout", tt.input))
		})
	}
}

func TestRunWorkflowAndYAML(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "hello.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`namespace: demo
name: hello
version: "2"
steps:
  - name: greet
    handler: greet
  - name: shout
    handler: shout
    depends_on: [greet]
    when: input.loud
`), 0o600))
	tests := []struct {
		name     string
		run      func(h *weftest.Harness) *weftest.Result
		greeting string
		loud     bool
	}{
		{"go builder", func(h *weftest.Harness) *weftest.Result {
			return h.RunWorkflow(context.Background(), workflow.New("demo", "hello", "1").Step("greet", "greet"), map[string]string{"name": "Ada"})
		}, `"hello Ada"`, false},
		{"yaml file", func(h *weftest.Harness) *weftest.Result {
			w := h.RegisterFile(path)
			return h.Run(context.Background(), w.Ref(), map[string]any{"name": "Bob", "loud": true})
		}, `"hello Bob"`, true},
		{"yaml source", func(h *weftest.Harness) *weftest.Result {
			src, err := os.ReadFile(path)
			require.NoError(t, err)
			h.RegisterYAML(string(src))
			return h.Run(context.Background(), "demo/hello", map[string]any{"name": "Cy", "loud": false})
		}, `"hello Cy"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := weftest.New(t)
			h.Handle("greet", weft.Typed(func(ctx context.Context, a *weft.Attempt, in struct{ Name string }) (string, error) {
				return "hello " + in.Name, nil
			})).Handle("shout", func(ctx context.Context, a *weft.Attempt) (any, error) {
				var s string
				err := a.Dep("greet", &s)
				return strings.ToUpper(s), err
			})
			res := tt.run(h).RequireCompleted(t)
			res.RequireStep(t, "greet").Completed().ResultJSON(tt.greeting)
			if tt.loud {
				res.RequireStep(t, "shout").Completed().ResultJSON(strings.ToUpper(tt.greeting))
			} else if _, ok := res.Step("shout"); ok {
				res.RequireStep(t, "shout").Skipped()
			}
		})
	}
}

func TestSubmitSignalWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := weftest.New(t)
	h.Handle("ship", func(ctx context.Context, a *weft.Attempt) (any, error) { return "shipped", nil })
	h.Register(workflow.New("shop", "approval", "1").
		Step("approve", "", workflow.AwaitSignal("approval", 0)).
		Step("ship", "ship", workflow.DependsOn("approve")))
	sub := h.Submit(ctx, weft.Submission{Workflow: "shop/approval"})
	_, err := h.Engine().Signal(ctx, sub.Task.ID, "approval", map[string]bool{"ok": true})
	require.NoError(t, err)
	res := h.Wait(ctx, sub.Task.ID).RequireCompleted(t)
	var approval struct {
		Signal  string
		Payload struct{ OK bool }
	}
	res.RequireStep(t, "approve").Completed().DecodeResult(&approval)
	require.Equal(t, "approval", approval.Signal)
	require.True(t, approval.Payload.OK)

	// Inspect reads the same task from any engine.
	again := weftest.Inspect(ctx, t, h.Engine(), sub.Task.ID)
	require.Equal(t, res.Task.State, again.Task.State)
	require.Equal(t, res.Transitions("ship"), again.Transitions("ship"))
}

func TestCheckpoint(t *testing.T) {
	t.Parallel()
	h := weftest.New(t)
	h.Handle("count", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var cp struct{ Done int }
		if a.Checkpoint != nil {
			if err := json.Unmarshal(a.Checkpoint, &cp); err != nil {
				return nil, err
			}
		}
		cp.Done += 5
		if err := a.SaveCheckpoint(ctx, cp); err != nil {
			return nil, err
		}
		if a.Number == 1 {
			return nil, errors.New("crashed half way")
		}
		return cp.Done, nil
	})
	w := workflow.New("batch", "count", "1").Step("count", "count",
		workflow.WithRetry(workflow.RetryPolicy{Backoff: "fixed", Initial: workflow.Duration(time.Millisecond)}))
	res := h.RunWorkflow(context.Background(), w, nil).RequireCompleted(t)
	res.RequireStep(t, "count").Attempts(2).CheckpointJSON(`{"Done": 10}`).ResultJSON(`10`)
}

// assertion is one check of a Result with the fake t.
type assertion func(t weftest.TestingT, res *weftest.Result)

// checked is a finished task to check: charge completed after two
// attempts, notify failed, refund skipped.
func checked() *weftest.Result {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	return &weftest.Result{
		Task: &weft.Task{ID: 7, Namespace: "shop", Workflow: "checkout", Version: "1", State: state.TaskFailed,
			Error: `step "notify" failed: smtp down`,
			Steps: []weft.TaskStep{
				{Name: "charge", State: state.StepCompleted, Attempts: 2, MaxAttempts: 3, Result: []byte(`{"ok":true,"cents":600}`),
					Checkpoint: []byte(`{"page":2}`)},
				{Name: "notify", State: state.StepFailed, Attempts: 1, MaxAttempts: 1, Error: "permanent: smtp down"},
				{Name: "refund", State: state.StepSkipped, MaxAttempts: 3},
			}},
		Audit: []weft.AuditEntry{
			{Step: "", From: "", To: "pending", At: at, Reason: "submitted"},
			{Step: "charge", From: "", To: "ready", At: at, Reason: "submitted"},
			{Step: "charge", From: "ready", To: "running", At: at, Attempt: 1, Reason: "claimed"},
			{Step: "", From: "pending", To: "running", At: at, Reason: "first step claimed"},
			{Step: "charge", From: "running", To: "waiting", At: at, Attempt: 1, Reason: "retry scheduled: busy"},
			{Step: "charge", From: "waiting", To: "ready", At: at, Attempt: 1, Reason: "run_at reached"},
			{Step: "charge", From: "ready", To: "running", At: at, Attempt: 2, Reason: "claimed"},
			{Step: "charge", From: "running", To: "completed", At: at, Attempt: 2},
			{Step: "notify", From: "running", To: "failed", At: at, Attempt: 1, Reason: "permanent: smtp down"},
			{Step: "refund", From: "pending", To: "skipped", At: at, Reason: `dependency "charge" succeeded`},
			{Step: "", From: "running", To: "failed", At: at, Reason: `step "notify" failed: smtp down`},
		},
	}
}

func TestAssertionsPass(t *testing.T) {
	t.Parallel()
	tests := map[string]assertion{
		"task state": func(t weftest.TestingT, r *weftest.Result) { r.RequireState(t, state.TaskFailed) },
		"task transition": func(t weftest.TestingT, r *weftest.Result) {
			r.RequireTaskTransition(t, "", state.TaskPending).RequireTaskTransition(t, state.TaskRunning, state.TaskFailed)
		},
		"step chain": func(t weftest.TestingT, r *weftest.Result) {
			r.RequireStep(t, "charge").Completed().Attempts(2).ResultJSON(` { "cents": 600.0, "ok": true } `).
				CheckpointJSON(`{"page":2}`).Transition(state.StepRunning, state.StepWaiting).Transition("", state.StepReady)
		},
		"failed step": func(t weftest.TestingT, r *weftest.Result) {
			r.RequireStep(t, "notify").Failed().Attempts(1).ErrorContains("smtp down")
		},
		"skipped step": func(t weftest.TestingT, r *weftest.Result) { r.RequireStep(t, "refund").Skipped().Attempts(0) },
		"decode": func(t weftest.TestingT, r *weftest.Result) {
			var v struct{ Cents int }
			r.RequireStep(t, "charge").DecodeResult(&v)
			if v.Cents != 600 {
				t.Fatalf("decoded %d cents", v.Cents)
			}
		},
		"nil result": func(t weftest.TestingT, _ *weftest.Result) {
			var r *weftest.Result // what a failed Run returns to a t whose Fatalf returns
			r.RequireCompleted(t).RequireStep(t, "charge").Completed().ResultJSON(`1`)
		},
	}
	for name, check := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFakeT(t)
			check(f, checked())
			require.Empty(t, f.failures())
		})
	}
}

func TestAssertionsFail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		check assertion
		want  []string
	}{
		{"task state", func(t weftest.TestingT, r *weftest.Result) { r.RequireCompleted(t) },
			[]string{"task 7 is failed, want completed", "task 7: shop/checkout@1 failed",
				"charge  completed  attempts 2/3  result {\"ok\":true,\"cents\":600}",
				"notify  failed     attempts 1/1  error: permanent: smtp down",
				`refund  skipped    attempts 0/3  (dependency "charge" succeeded)`}},
		{"task transition", func(t weftest.TestingT, r *weftest.Result) {
			r.RequireTaskTransition(t, state.TaskRunning, state.TaskCompleted)
		}, []string{"task 7 never went from running to completed", "new -> pending (submitted)", "running -> failed (step \"notify\" failed: smtp down)"}},
		{"no such step", func(t weftest.TestingT, r *weftest.Result) { r.RequireStep(t, "ship").Completed() },
			[]string{`task 7 has no step "ship"; its steps are "charge", "notify", "refund"`}},
		{"step state", func(t weftest.TestingT, r *weftest.Result) { r.RequireStep(t, "notify").Completed() },
			[]string{`step "notify" of task 7 is failed, want completed; its error: permanent: smtp down`, "task 7: shop/checkout@1 failed"}},
		{"skipped step state", func(t weftest.TestingT, r *weftest.Result) { r.RequireStep(t, "refund").State(state.StepCompleted) },
			[]string{`step "refund" of task 7 is skipped, want completed; last transition: dependency "charge" succeeded`}},
		{"failed", func(t weftest.TestingT, r *weftest.Result) { r.RequireStep(t, "charge").Failed() },
			[]string{`step "charge" of task 7 is completed, want failed`}},
		{"skipped", func(t weftest.TestingT, r *weftest.Result) { r.RequireStep(t, "charge").Skipped() },
			[]string{`step "charge" of task 7 is completed, want skipped`}},
		{"attempts", func(t weftest.TestingT, r *weftest.Result) { r.RequireStep(t, "charge").Attempts(1) },
			[]string{`step "charge" of task 7 made 2 attempts, want 1`}},
		{"error missing", func(t weftest.TestingT, r *weftest.Result) { r.RequireStep(t, "charge").ErrorContains("down") },
			[]string{`step "charge" of task 7 has no error (it is completed), want one containing "down"`}},
		{"error differs", func(t weftest.TestingT, r *weftest.Result) { r.RequireStep(t, "notify").ErrorContains("timeout") },
			[]string{`step "notify" of task 7 has the error "permanent: smtp down", want one containing "timeout"`}},
		{"result differs", func(t weftest.TestingT, r *weftest.Result) { r.RequireStep(t, "charge").ResultJSON(`{"ok": false}`) },
			[]string{`step "charge" of task 7 has the result {"ok":true,"cents":600}, want {"ok":false}`}},
		{"result missing", func(t weftest.TestingT, r *weftest.Result) { r.RequireStep(t, "notify").ResultJSON(`"sent"`) },
			[]string{`step "notify" of task 7 has no result (it is failed), want "sent"`}},
		{"want not JSON", func(t weftest.TestingT, r *weftest.Result) { r.RequireStep(t, "charge").ResultJSON(`{ok}`) },
			[]string{`the result wanted is not valid JSON`, `{ok}`}},
		{"checkpoint differs", func(t weftest.TestingT, r *weftest.Result) { r.RequireStep(t, "charge").CheckpointJSON(`{"page":3}`) },
			[]string{`step "charge" of task 7 has the checkpoint {"page":2}, want {"page":3}`}},
		{"decode nothing", func(t weftest.TestingT, r *weftest.Result) {
			var v any
			r.RequireStep(t, "refund").DecodeResult(&v)
		}, []string{`step "refund" of task 7 has no result to decode (it is skipped)`}},
		{"decode wrong type", func(t weftest.TestingT, r *weftest.Result) {
			var v []int
			r.RequireStep(t, "charge").DecodeResult(&v)
		}, []string{`step "charge" of task 7 has a result that does not decode into *[]int`}},
		{"transition", func(t weftest.TestingT, r *weftest.Result) {
			r.RequireStep(t, "charge").Transition(state.StepRunning, state.StepFailed)
		}, []string{`step "charge" of task 7 never went from running to failed; its transitions:`,
			"new -> ready (submitted)", "running -> waiting (retry scheduled: busy)", "running -> completed"}},
		{"only the first failure of a chain", func(t weftest.TestingT, r *weftest.Result) {
			r.RequireStep(t, "notify").Completed().Attempts(5).ResultJSON(`1`).Transition(state.StepReady, state.StepSkipped)
		}, []string{`step "notify" of task 7 is failed, want completed`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeT(t)
			tt.check(f, checked())
			requireFailedWith(t, f, tt.want...)
		})
	}
}

func TestHarnessFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []weftest.Option
		run  func(t *testing.T, h *weftest.Harness)
		want []string
	}{
		{
			name: "invalid config",
			opts: []weftest.Option{weftest.WithConfig(func(c *weft.Config) { c.LeaseTTL = time.Millisecond })},
			want: []string{"weftest: create the engine:", "LeaseTTL"},
		},
		{
			name: "invalid workflow",
			run: func(t *testing.T, h *weftest.Harness) {
				require.Nil(t, h.Register(workflow.New("shop", "loop", "1").Step("a", "x", workflow.DependsOn("b")).Step("b", "x", workflow.DependsOn("a"))))
			},
			want: []string{"weftest: register workflow shop/loop@1:", "cycle"},
		},
		{
			name: "invalid template",
			run: func(t *testing.T, h *weftest.Harness) {
				require.Nil(t, h.RegisterYAML("namespace: shop\nname: checkout\nversion: 1\nsteps:\n  - name: charge\n    handler: charge\n    retrys: 3\n"))
			},
			want: []string{"weftest: parse template:", `template.yaml:7: step "charge": unknown key "retrys"`},
		},
		{
			name: "missing file",
			run: func(t *testing.T, h *weftest.Harness) {
				require.Nil(t, h.RegisterFile(filepath.Join(t.TempDir(), "nope.yaml")))
			},
			want: []string{"weftest: load template", "nope.yaml"},
		},
		{
			name: "unknown workflow",
			run: func(t *testing.T, h *weftest.Harness) {
				require.Nil(t, h.Run(context.Background(), "shop/nope", nil))
			},
			want: []string{"weftest: submit shop/nope:", "not found", "register it"},
		},
		{
			name: "bad reference",
			run: func(t *testing.T, h *weftest.Harness) {
				require.Nil(t, h.Run(context.Background(), "nope", nil))
			},
			want: []string{"weftest: submit:", `"nope": want namespace/name`},
		},
		{
			name: "missing handler",
			run: func(t *testing.T, h *weftest.Harness) {
				h.Register(workflow.New("shop", "checkout", "1").Step("charge", "shop.charge").Step("ship", "shop.ship"))
				require.Nil(t, h.Run(context.Background(), "shop/checkout", nil))
			},
			want: []string{"weftest: submit shop/checkout@1: no handler is registered for shop.charge, shop.ship"},
		},
		{
			name: "refused submission",
			run: func(t *testing.T, h *weftest.Harness) {
				h.Handle("x", func(context.Context, *weft.Attempt) (any, error) { return nil, nil })
				w := workflow.New("shop", "keyed", "1").Step("x", "x")
				w.Identity = workflow.IdentityCaller
				require.Nil(t, h.RunWorkflow(context.Background(), w, nil))
			},
			want: []string{"weftest: submit shop/keyed@1:", "idempotency key is required"},
		},
		{
			name: "task does not end",
			opts: []weftest.Option{weftest.WithTimeout(200 * time.Millisecond)},
			run: func(t *testing.T, h *weftest.Harness) {
				release := make(chan struct{})
				t.Cleanup(func() { close(release) }) // before the harness stops
				h.Handle("stuck", func(ctx context.Context, a *weft.Attempt) (any, error) {
					_ = a.Progress(ctx, 0.25, "a quarter")
					<-release
					return nil, nil
				})
				require.Nil(t, h.RunWorkflow(context.Background(), workflow.New("shop", "stuck", "1").Step("wait", "stuck"), nil))
			},
			want: []string{"weftest: wait for task 1: it did not end within 200ms (WithTimeout sets how long to wait)",
				"task 1: shop/stuck@1 running", `wait  running  attempts 1/3  progress 25% "a quarter"`},
		},
		{
			name: "context ends first",
			run: func(t *testing.T, h *weftest.Harness) {
				h.Register(workflow.New("shop", "approval", "1").Step("approve", "", workflow.AwaitSignal("approval", 0)))
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				require.Nil(t, h.Run(ctx, "shop/approval", nil))
			},
			want: []string{"weftest: wait for task 1: context deadline exceeded", `approve  waiting  signal "approval"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeT(t)
			h := weftest.New(f, tt.opts...)
			if tt.run != nil {
				tt.run(t, h)
			}
			requireFailedWith(t, f, tt.want...)
		})
	}
}

func TestLogs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []weftest.Option
		want string // in the test's log; "" for nothing there
	}{
		{"quiet by default", nil, ""},
		{"test log", []weftest.Option{weftest.WithTestLog(slog.LevelInfo)}, "engine started"},
		{"logger wins when last", []weftest.Option{weftest.WithTestLog(slog.LevelInfo), weftest.WithLogger(slog.New(slog.DiscardHandler))}, ""},
		{"config wins", []weftest.Option{weftest.WithTestLog(slog.LevelInfo), weftest.WithConfig(func(c *weft.Config) { c.Logger = slog.New(slog.DiscardHandler) })}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeT(t)
			h := weftest.New(f, tt.opts...)
			require.NotNil(t, h.Engine())
			require.Equal(t, weftest.DefaultTimeout, h.Timeout())
			f.mu.Lock()
			logs := strings.Join(f.logs, "\n")
			f.mu.Unlock()
			if tt.want == "" {
				require.Empty(t, logs)
			} else {
				require.Contains(t, logs, tt.want)
			}
			require.Empty(t, f.failures())
		})
	}
}

func TestCleanupStopsTheEngine(t *testing.T) {
	t.Parallel()
	var h *weftest.Harness
	t.Run("inner", func(t *testing.T) {
		h = weftest.New(t)
		h.Handle("x", func(ctx context.Context, a *weft.Attempt) (any, error) { return nil, nil })
		h.RunWorkflow(context.Background(), workflow.New("a", "b", "1").Step("x", "x"), nil).RequireCompleted(t)
		require.True(t, h.Engine().Running())
	})
	require.False(t, h.Engine().Running(), "the engine still runs after its test ended")
}

func TestWithStore(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	first := weftest.New(t, weftest.WithStore(s))
	first.Handle("x", func(ctx context.Context, a *weft.Attempt) (any, error) { return a.Number, nil })
	w := first.Register(workflow.New("a", "b", "1").Step("x", "x"))
	// A second harness on the first one's store sees its workflows and tasks.
	second := weftest.New(t, weftest.WithStore(s))
	second.Handle("x", func(ctx context.Context, a *weft.Attempt) (any, error) { return a.Number, nil })
	res := second.Run(context.Background(), w.Ref(), nil).RequireCompleted(t)
	again := weftest.Inspect(context.Background(), t, first.Engine(), res.Task.ID)
	again.RequireCompleted(t).RequireStep(t, "x").ResultJSON(`1`)
}
