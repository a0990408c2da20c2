package cliview_test

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/cliview"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// TestViews: each view writes its records as the CLI prints them. Times
// are printed in the local zone: {t0}, {t1}, ... in a want stand for the
// times of the fixture, all of one width.
func TestViews(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	t1, t2 := t0.Add(2*time.Second), t0.Add(90*time.Second)
	now := t0.Add(time.Hour)
	times := strings.NewReplacer(
		"{t0}", t0.Local().Format(time.DateTime),
		"{t1}", t1.Local().Format(time.DateTime),
		"{t2}", t2.Local().Format(time.DateTime),
		"{t0.ms}", t0.Local().Format(time.DateTime+".000"),
		"{t1.ms}", t1.Local().Format(time.DateTime+".000"),
	)

	done := wire.Task{ID: 7, Namespace: "shop", Workflow: "checkout", Version: "2", State: state.TaskCompleted,
		Input: json.RawMessage(`{"order":1}`), CreatedAt: t0, StartedAt: &t1, FinishedAt: &t2, Children: []int64{8, 9},
		Steps: []wire.Step{
			{ID: 21, Name: "charge", State: state.StepCompleted, Attempts: 2, MaxAttempts: 3, Result: json.RawMessage(`{"ok":true}`)},
			{ID: 22, Name: "approval", State: state.StepWaiting, Signal: "approve", MaxAttempts: 1},
			{ID: 23, Name: "ship", State: state.StepFailed, Attempts: 3, MaxAttempts: 3, Error: "carrier down"},
		}}
	running := wire.Task{ID: 9, Namespace: "shop", Workflow: "refund", Version: "1", State: state.TaskRunning, CreatedAt: t1,
		Active: []wire.Step{{Name: "pay", State: state.StepRunning, Attempts: 1, MaxAttempts: 5}}}
	tagged := running
	tagged.Tags = map[string]string{"env": "staging", "team": "ops"}

	for _, tt := range []struct {
		name string
		view func(w io.Writer) error
		want string
	}{
		{"a task with steps", func(w io.Writer) error { return cliview.Task(w, &done, now) }, `Task:      7
Workflow:  shop/checkout@2
State:     completed
Created:   {t0}
Started:   {t1}
Finished:  {t2} (1m30s)
Children:  8, 9
Input:     {"order":1}

ID  STEP      STATE                       ATTEMPTS  ERROR         RESULT
21  charge    completed                   2/3       -             {"ok":true}
22  approval  waiting for signal approve  0/1       -             -
23  ship      failed                      3/3       carrier down  -
`},
		{"an audit trail", func(w io.Writer) error {
			return cliview.Audit(w, []wire.AuditEntry{
				{At: t0, From: "", To: "pending", Reason: "submitted"},
				{At: t1, Step: "charge", From: "ready", To: "running", Attempt: 1, EngineID: "host-1"},
			})
		}, `
TIME                     STEP    FROM   TO       ATTEMPT  ENGINE  REASON
{t0.ms}  -       -      pending  -        -       submitted
{t1.ms}  charge  ready  running  1        host-1  -
`},
		{"a task list without tags", func(w io.Writer) error { return cliview.Tasks(w, []wire.Task{running, done}, now) },
			"ID  WORKFLOW         STATE      NOW              CREATED              FINISHED             ERROR\n" +
				"9   shop/refund@1    running    pay running 1/5  {t1}  -                    \n" +
				"7   shop/checkout@2  completed  -                {t0}  {t2}  \n"},
		{"a task list with tags", func(w io.Writer) error { return cliview.Tasks(w, []wire.Task{tagged, done}, now) },
			"ID  WORKFLOW         STATE      NOW              CREATED              FINISHED             TAGS                  ERROR\n" +
				"9   shop/refund@1    running    pay running 1/5  {t1}  -                    env=staging,team=ops  \n" +
				"7   shop/checkout@2  completed  -                {t0}  {t2}  -                     \n"},
		{"a step", func(w io.Writer) error { return cliview.Step(w, &done.Steps[2]) }, `Step:      23 (ship of task 0)
Handler:   -
State:     failed
Attempts:  3/3
Started:   -
Finished:  -
Error:     carrier down
Result:    -
`},
		{"an event", func(w io.Writer) error {
			return cliview.Event(w, wire.Event{Cursor: "c1", Type: "step.failed", Workflow: "shop/checkout",
				AuditEntry: wire.AuditEntry{TaskID: 7, Step: "ship", Attempt: 3, At: t1, Reason: "carrier\ndown"}}, false)
		}, "{t1.ms}  step.failed     shop/checkout  task 7  ship  attempt 3  carrier down  (id c1)\n"},
		{"limits set", func(w io.Writer) error {
			limit, weight := 4, 0
			cliview.Limits(w, wire.PolicyChange{Target: "shop", Concurrency: &limit, Weight: &weight}, wire.Policy{Concurrency: 4, Running: 1})
			return nil
		}, "shop: at most 4 steps at once (1 running)\nshop: weight 1 (the default)\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			require.NoError(t, tt.view(&out))
			require.Equal(t, times.Replace(tt.want), out.String())
		})
	}
}

// TestViewsEscapeControlCharacters: recorded text that holds control
// characters (a reason or an actor with an escape sequence, a carriage
// return, a bell) is printed escaped by every view, so that it cannot
// drive the terminal or forge a row; the views' own layout is kept.
func TestViewsEscapeControlCharacters(t *testing.T) {
	t.Parallel()
	const evil = "red\x1b[31m\rover\x07"
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	step := wire.Step{ID: 1, Name: "s", State: state.StepFailed, EngineID: evil, Error: evil, Attempts: 1, MaxAttempts: 1}
	task := wire.Task{ID: 1, Namespace: "ns", Workflow: "wf", Version: "1", State: state.TaskFailed, CreatedAt: at, Error: evil, Steps: []wire.Step{step}}
	for name, view := range map[string]func(w io.Writer) error{
		"tasks": func(w io.Writer) error { return cliview.Tasks(w, []wire.Task{task}, at) },
		"task":  func(w io.Writer) error { return cliview.Task(w, &task, at) },
		"step":  func(w io.Writer) error { return cliview.Step(w, &step) },
		"audit": func(w io.Writer) error {
			return cliview.Audit(w, []wire.AuditEntry{{TaskID: 1, Step: "s", From: "running", To: "failed", At: at, EngineID: evil, Reason: evil}})
		},
		"event": func(w io.Writer) error {
			return cliview.Event(w, wire.Event{Type: "step.failed", Cursor: "1",
				AuditEntry: wire.AuditEntry{At: at, TaskID: 1, Step: "s", EngineID: evil, Reason: evil}}, false)
		},
		"keys": func(w io.Writer) error { return cliview.Keys(w, []wire.APIKey{{ID: "k", Name: evil, CreatedAt: at}}) },
		"operator log": func(w io.Writer) error {
			return cliview.OperatorLog(w, []wire.OperatorEntry{{At: at, Actor: evil, Action: "delete", Subject: "task 1", Reason: evil}})
		},
	} {
		var b bytes.Buffer
		require.NoError(t, view(&b), name)
		out := b.String()
		require.NotContains(t, out, "\x1b", name)
		require.NotContains(t, out, "\r", name)
		require.NotContains(t, out, "\x07", name)
		require.Contains(t, out, `red\x1b[31m`, "%s: the text is shown, escaped:\n%s", name, out)
	}
}
