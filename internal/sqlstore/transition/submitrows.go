package transition

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file builds the rows a submission writes, once for the statement
// that writes one task (submit.go) and the statements that write many
// (submitbulk.go): what a task's row holds, and what each of its steps
// starts as.

// newTask is what the row of a task to insert holds beyond its
// TaskInsert.
type newTask struct {
	input     json.RawMessage
	runAt     int64
	goodUntil *int64  // nil: none
	key       *string // nil: none
	tags      *string // JSON object; nil: none
}

func (t *submitTx) newTask(in store.TaskInsert) newTask {
	n := newTask{input: in.Input, runAt: t.Now}
	if len(n.input) == 0 {
		n.input = json.RawMessage(`{}`)
	}
	if !in.RunAt.IsZero() {
		n.runAt = in.RunAt.UnixMicro()
	}
	if !in.GoodUntil.IsZero() {
		g := in.GoodUntil.UnixMicro()
		n.goodUntil, t.Timed = &g, true
	}
	if key := in.IdempotencyKey; key != "" {
		n.key = &key
	}
	if tags, ok := encodeTags(in.Tags).(string); ok {
		n.tags = &tags
	}
	return n
}

// row is the task's row for every statement that inserts tasks
// (insertTask, taskRowsInsert, insertTasksBulk, the COPY of writeTasks):
// namespace, workflow, version, input, priority, idempotency key, run_at,
// good_until, remaining, limit_key, limit_n, tags and trace_context (see
// columnArrays for the types).
func (n newTask) row(in store.TaskInsert) []any {
	return []any{in.Namespace, in.Workflow, in.Version, string(n.input), int64(in.Priority), n.key, n.runAt, n.goodUntil,
		int64(len(in.Steps)), in.LimitKey, int64(in.Limit), n.tags, sqltx.PackTrace(in.TraceParent, in.TraceState)}
}

// task is the record of the task inserted with id.
func (n newTask) task(in store.TaskInsert, id, now int64) store.Task {
	task := store.Task{ID: id, Namespace: in.Namespace, Workflow: in.Workflow, Version: in.Version, State: state.TaskPending,
		Input: n.input, Priority: in.Priority, IdempotencyKey: in.IdempotencyKey, RunAt: time.UnixMicro(n.runAt),
		CreatedAt: time.UnixMicro(now), Tags: in.Tags}
	if !in.GoodUntil.IsZero() {
		g := in.GoodUntil
		task.GoodUntil = &g
	}
	return task
}

// stepTemplate holds the columns of a step's row that depend on the step
// alone, not on its task: the same for every task of a workflow version.
type stepTemplate struct {
	name, handler, deps, children, kind, rule, signal string
	limitKey, rateKey, breakerKey                     string
	priority                                          int
	maxAttempts, ttl, waitTimeout, runTimeout         int64
	limitN, rateN, ratePer, breakerN, breakerCooldown int64
	preemptible                                       int64
	// root: no dependencies, so the step starts ready or waiting for its
	// run_at (a signal step too: its claim begins its wait).
	root bool
	// values are those of stepTemplateColumns, boxed once for every task's
	// row (appendTo).
	values []any
}

// templates holds the step templates of the workflows of one submission,
// built once per steps slice: the tasks of one workflow version share it
// (the engine resolves a workflow once per call).
type templates map[templateKey]*template

type templateKey struct {
	first *store.StepInsert
	n     int
}

// template is the templates of a task's steps, and the statements that
// insert them where the database takes no arrays (insertTaskSteps), built
// on first use.
type template struct {
	steps   []stepTemplate
	inserts []string // by chunk of stepsPerInsert steps
}

// of returns the templates of steps, building them on first use.
func (m templates) of(steps []store.StepInsert) *template {
	if len(steps) == 0 {
		return &template{}
	}
	k := templateKey{&steps[0], len(steps)}
	if tpl, ok := m[k]; ok {
		return tpl
	}
	children := make([][]int, len(steps))
	for j, st := range steps {
		for _, d := range st.Deps {
			children[d] = append(children[d], j)
		}
	}
	tpl := make([]stepTemplate, len(steps))
	for j, st := range steps {
		maxAttempts := st.MaxAttempts
		if maxAttempts <= 0 {
			maxAttempts = 1
		}
		bk, bn, bc := breakerColumns(st.Breaker)
		handler := st.Handler
		if st.Kind == store.KindSignal {
			handler = store.SignalHandler
		}
		tpl[j] = stepTemplate{name: st.Name, handler: handler, deps: sqltx.FormatIdx(st.Deps), children: sqltx.FormatIdx(children[j]),
			kind: st.Kind, rule: st.TriggerRule, signal: st.Signal, limitKey: st.LimitKey, rateKey: st.RateKey, breakerKey: bk,
			priority: st.Priority, maxAttempts: int64(maxAttempts), ttl: st.TTL.Microseconds(), waitTimeout: st.SignalTimeout.Microseconds(),
			runTimeout: st.Timeout.Microseconds(), limitN: int64(st.Limit), rateN: int64(st.Rate.Limit), ratePer: st.Rate.Per.Microseconds(),
			breakerN: int64(bn), breakerCooldown: bc, preemptible: sqltx.BoolInt(st.Preemptible),
			root: len(st.Deps) == 0}
		tpl[j].values = tpl[j].appendTo(make([]any, 0, len(stepTemplateColumns)), j)
	}
	t := &template{steps: tpl}
	m[k] = t
	return t
}

// stepStart is how a new step starts.
type stepStart struct {
	state    state.Step
	priority int64
	sortKey  int64
	expires  *int64 // nil: none
	runAt    *int64 // nil: none
}

// start returns how step tp of a task of priority prio, due at runAt,
// starts; a step that starts ready counts towards the notification, one
// that starts with a time it falls due marks the transaction timed.
func (t *submitTx) start(tp *stepTemplate, prio int, runAt int64) stepStart {
	p := int64(prio + tp.priority)
	s := stepStart{state: state.StepPending, priority: p}
	if !tp.root {
		return s
	}
	if runAt > t.Now {
		at := runAt
		s.state, s.runAt = state.StepWaiting, &at
	} else {
		s.state, s.sortKey = state.StepReady, t.Now-p*t.H.Aging
		t.Readied++
	}
	if tp.ttl > 0 {
		exp := max(runAt, t.Now) + tp.ttl
		s.expires = &exp
	}
	if s.runAt != nil || s.expires != nil {
		t.Timed = true
	}
	return s
}

// A new step's row is three groups of columns: its task's, the same for
// every step of the task (appendStepTask); its start's (stepStart.appendTo);
// and its template's, the same for that step of every task of the workflow
// version (stepTemplate.appendTo).
var (
	stepTaskColumns     = []string{"task_id", "namespace", "workflow", "task_limit_key", "task_limit_n"}
	stepStartColumns    = []string{"state", "priority", "sort_key", "expires_at", "run_at"}
	stepTemplateColumns = []string{"idx", "name", "handler", "deps", "children", "max_attempts", "ttl", "kind", "trigger_rule", "signal",
		"wait_timeout", "run_timeout", "limit_key", "limit_n", "preemptible", "rate_key", "rate_n", "rate_per",
		"breaker_key", "breaker_n", "breaker_cooldown"}
	// stepInsertColumns are the columns a new step's row sets, in the order
	// of newStepRow.
	stepInsertColumns = slices.Concat(stepTaskColumns, stepStartColumns, stepTemplateColumns)
)

// appendStepTask appends the values of stepTaskColumns for a step of task
// TaskID (in, its insert) to dst.
func appendStepTask(dst []any, taskID int64, in store.TaskInsert) []any {
	return append(dst, taskID, in.Namespace, in.Workflow, in.LimitKey, int64(in.Limit))
}

// appendTo appends the values of stepStartColumns to dst.
func (s stepStart) appendTo(dst []any) []any {
	return append(dst, string(s.state), s.priority, s.sortKey, s.expires, s.runAt)
}

// appendTo appends the values of stepTemplateColumns for step idx to dst.
func (tp *stepTemplate) appendTo(dst []any, idx int) []any {
	return append(dst, int64(idx), tp.name, tp.handler, tp.deps, tp.children, tp.maxAttempts, tp.ttl, tp.kind, tp.rule, tp.signal,
		tp.waitTimeout, tp.runTimeout, tp.limitKey, tp.limitN, tp.preemptible, tp.rateKey, tp.rateN, tp.ratePer,
		tp.breakerKey, tp.breakerN, tp.breakerCooldown)
}

// newStepRow is the row of step idx of task TaskID (in, its insert), of
// template tp, starting as st: the values of stepInsertColumns, each an
// int64, a string or an *int64 (nil: NULL).
func newStepRow(taskID int64, idx int, tp *stepTemplate, in store.TaskInsert, st stepStart) []any {
	row := make([]any, 0, len(stepInsertColumns))
	return tp.appendTo(st.appendTo(appendStepTask(row, taskID, in)), idx)
}
