package weftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/workflow"
)

// TestingT is the part of testing.TB that weftest uses. *testing.T,
// *testing.B and *testing.F implement it.
type TestingT interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// DefaultTimeout is how long Run and Wait give a task to end unless
// WithTimeout says otherwise.
const DefaultTimeout = 10 * time.Second

// Harness is an engine for one test: on a fresh SQLite file, started, and
// stopped and closed when the test ends. Its methods fail that test on any
// error, so they must be called from its goroutine: give each subtest a
// harness of its own (one costs tens of milliseconds).
type Harness struct {
	t       TestingT
	engine  *weft.Engine
	timeout time.Duration
}

// Option configures a Harness.
type Option func(*options)

type options struct {
	config  func(*weft.Config)
	timeout time.Duration
	logger  *slog.Logger
	testLog *slog.Level
	store   store.Store
}

// WithConfig lets fn change the engine's configuration after the harness
// has set its own defaults: Concurrency 10, PollInterval 50ms,
// HeartbeatInterval 100ms, LeaseTTL 1s, ShutdownTimeout 5s and a logger
// that discards everything.
func WithConfig(fn func(c *weft.Config)) Option { return func(o *options) { o.config = fn } }

// WithTimeout sets how long Run and Wait give a task to end before they
// fail the test (default DefaultTimeout).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithLogger sends the engine's logs to l instead of discarding them.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger, o.testLog = l, nil }
}

// WithTestLog sends the engine's logs from level up to the test's log
// (t.Logf), shown when the test fails or runs with -v.
func WithTestLog(level slog.Level) Option {
	return func(o *options) { o.logger, o.testLog = nil, &level }
}

// WithStore runs the engine on s (a PostgreSQL store, for instance)
// instead of a fresh SQLite file. The harness does not close s.
func WithStore(s store.Store) Option { return func(o *options) { o.store = s } }

// New returns a started engine for the test t on a fresh SQLite file in
// t.TempDir(). It is stopped, and its database closed, when the test ends.
func New(t TestingT, opts ...Option) *Harness {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cfg := weft.Config{
		Concurrency:       10,
		PollInterval:      50 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		LeaseTTL:          time.Second,
		ShutdownTimeout:   5 * time.Second,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	switch {
	case o.logger != nil:
		cfg.Logger = o.logger
	case o.testLog != nil:
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: *o.testLog}))
	}
	if o.config != nil {
		o.config(&cfg)
	}
	h := &Harness{t: t, timeout: o.timeout}
	if h.timeout <= 0 {
		h.timeout = DefaultTimeout
	}
	ctx := context.Background()
	s := o.store
	if s == nil {
		// store/sqlite rather than weftdb: a test binary need not link the
		// PostgreSQL driver.
		db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
		if err != nil {
			t.Fatalf("weftest: open a SQLite store: %v", err)
			return h
		}
		s = db
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("weftest: close the store: %v", err)
			}
		})
	}
	e, err := weft.New(s, cfg)
	if err != nil {
		t.Fatalf("weftest: create the engine: %v", err)
		return h
	}
	if err := e.Start(ctx); err != nil {
		t.Fatalf("weftest: start the engine: %v", err)
		return h
	}
	h.engine = e
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout+5*time.Second)
		defer cancel()
		if err := e.Stop(ctx); err != nil {
			t.Errorf("weftest: stop the engine: %v", err)
		}
	})
	return h
}

// testWriter writes each log record to the test's log.
type testWriter struct{ t TestingT }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// Engine returns the harness's engine, for what the harness does not wrap.
func (h *Harness) Engine() *weft.Engine { return h.engine }

// Timeout returns how long Run and Wait give a task to end.
func (h *Harness) Timeout() time.Duration { return h.timeout }

// Handle registers a Go handler under name and returns the harness, so
// calls chain.
func (h *Harness) Handle(name string, fn weft.Handler) *Harness {
	h.engine.Handle(name, fn)
	return h
}

// Register validates and registers a workflow and returns it. An invalid
// definition fails the test with every problem found.
func (h *Harness) Register(w *workflow.Workflow) *workflow.Workflow {
	h.t.Helper()
	if err := h.engine.Register(context.Background(), w); err != nil {
		h.t.Fatalf("weftest: register workflow %s:\n%s", w.Ref(), indent(err.Error()))
		return nil
	}
	return w
}

// RegisterFile loads a YAML template from path and registers it. A
// template with problems fails the test with each one's file and line.
func (h *Harness) RegisterFile(path string) *workflow.Workflow {
	h.t.Helper()
	w, err := workflow.Load(path)
	if err != nil {
		h.t.Fatalf("weftest: load template %s:\n%s", path, indent(err.Error()))
		return nil
	}
	return h.Register(w)
}

// RegisterYAML parses a YAML template (errors name it "template.yaml")
// and registers it.
func (h *Harness) RegisterYAML(src string) *workflow.Workflow {
	h.t.Helper()
	w, err := workflow.Parse("template.yaml", []byte(src))
	if err != nil {
		h.t.Fatalf("weftest: parse template:\n%s", indent(err.Error()))
		return nil
	}
	return h.Register(w)
}

// Submit submits one task without waiting for it. It fails the test if
// the submission is refused or the workflow names handlers that are not
// registered on the harness.
func (h *Harness) Submit(ctx context.Context, s weft.Submission) weft.SubmitResult {
	h.t.Helper()
	ns, name, version, err := workflow.ParseRef(s.Workflow)
	if err != nil {
		h.t.Fatalf("weftest: submit: %v", err)
		return weft.SubmitResult{}
	}
	w, err := h.engine.Workflow(ctx, ns, name, version)
	if err != nil {
		h.t.Fatalf("weftest: submit %s: %v (register it with Register, RegisterFile or RegisterYAML)", s.Workflow, err)
		return weft.SubmitResult{}
	}
	if missing := h.engine.MissingHandlers(w); len(missing) > 0 {
		h.t.Fatalf("weftest: submit %s: no handler is registered for %s (register them with Handle)", w.Ref(), strings.Join(missing, ", "))
		return weft.SubmitResult{}
	}
	res, err := h.engine.Submit(ctx, s)
	if err != nil {
		h.t.Fatalf("weftest: submit %s: %v", s.Workflow, err)
		return weft.SubmitResult{}
	}
	return res
}

// Run submits one task of the workflow ref ("namespace/name" for the newest
// version, or "namespace/name@version") with input, runs it to its end and
// returns it. It fails the test if the task does not end within the
// harness's timeout or ctx ends first. A task that ends failed does not
// fail the test: check it with the Result's methods.
func (h *Harness) Run(ctx context.Context, ref string, input any) *Result {
	h.t.Helper()
	return h.RunSubmission(ctx, weft.Submission{Workflow: ref, Input: input})
}

// RunWorkflow registers w (again, if it is: the same definition may be
// registered any number of times) and runs one task of it, like Run.
func (h *Harness) RunWorkflow(ctx context.Context, w *workflow.Workflow, input any) *Result {
	h.t.Helper()
	if h.Register(w) == nil {
		return nil
	}
	return h.Run(ctx, w.Ref(), input)
}

// RunSubmission submits s and runs its task to its end, like Run. A
// duplicate submission waits for the task it found.
func (h *Harness) RunSubmission(ctx context.Context, s weft.Submission) *Result {
	h.t.Helper()
	res := h.Submit(ctx, s)
	if res.Task.ID == 0 {
		return nil
	}
	return h.Wait(ctx, res.Task.ID)
}

// Wait waits for a task to end and returns it with its steps and audit
// trail. It fails the test, showing where the task stands, if it does not
// end within the harness's timeout or ctx ends first.
func (h *Harness) Wait(ctx context.Context, taskID int64) *Result {
	h.t.Helper()
	wctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	task, err := h.engine.Wait(wctx, taskID)
	if err != nil {
		why := err.Error()
		switch {
		case ctx.Err() != nil:
			// The caller's context ended: say so, whichever read of the
			// wait it interrupted.
			why = context.Cause(ctx).Error()
		case errors.Is(err, context.DeadlineExceeded):
			why = fmt.Sprintf("it did not end within %s (WithTimeout sets how long to wait)", h.timeout)
		}
		// Read the task again: the wait may have ended in the middle of a
		// read.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		task, terr := h.engine.Get(rctx, taskID)
		if terr != nil {
			h.t.Fatalf("weftest: wait for task %d: %s (and reading it: %v)", taskID, why, terr)
			return nil
		}
		res := &Result{Task: task}
		res.Audit, _ = h.engine.Audit(rctx, taskID)
		h.t.Fatalf("weftest: wait for task %d: %s\n%s", taskID, why, res.describe())
		return nil
	}
	return h.result(ctx, task)
}

func (h *Harness) result(ctx context.Context, task *weft.Task) *Result {
	h.t.Helper()
	audit, err := h.engine.Audit(ctx, task.ID)
	if err != nil {
		h.t.Fatalf("weftest: audit trail of task %d: %v", task.ID, err)
		return nil
	}
	return &Result{Task: task, Audit: audit}
}

// Inspect returns the task taskID of engine e as it stands, with its steps
// and audit trail, so that the assertions of Result work on any engine. It
// fails the test if the task cannot be read.
func Inspect(ctx context.Context, t TestingT, e *weft.Engine, taskID int64) *Result {
	t.Helper()
	task, err := e.Get(ctx, taskID)
	if err != nil {
		t.Fatalf("weftest: get task %d: %v", taskID, err)
		return nil
	}
	audit, err := e.Audit(ctx, taskID)
	if err != nil {
		t.Fatalf("weftest: audit trail of task %d: %v", taskID, err)
		return nil
	}
	return &Result{Task: task, Audit: audit}
}

// indent indents every line of s by four spaces.
func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
