package weftest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Result is a task as Run, Wait or Inspect found it: its state, its steps
// and its audit trail. Its Require methods check it, failing the test with
// t.Fatalf and a description of the task when it is not as expected.
type Result struct {
	// Task is the task with its steps, in definition order (the items of
	// batches last).
	Task *weft.Task
	// Audit is the task's audit trail, oldest first.
	Audit []weft.AuditEntry
}

// Step returns the step of that name, and whether the task has one.
func (r *Result) Step(name string) (weft.TaskStep, bool) {
	for _, s := range r.Task.Steps {
		if s.Name == name {
			return s, true
		}
	}
	return weft.TaskStep{}, false
}

// RequireState checks the task's state and returns r.
//
// The Require methods do nothing on a nil Result, which Run and Wait
// return only after failing the test.
func (r *Result) RequireState(t TestingT, want state.Task) *Result {
	t.Helper()
	if r != nil && r.Task.State != want {
		t.Fatalf("weftest: task %d is %s, want %s\n%s", r.Task.ID, r.Task.State, want, r.describe())
	}
	return r
}

// RequireCompleted checks that the task completed and returns r.
func (r *Result) RequireCompleted(t TestingT) *Result {
	t.Helper()
	return r.RequireState(t, state.TaskCompleted)
}

// RequireTaskTransition checks that the task, as a whole, went from one
// state to another (for a task created pending, from "" to pending), and
// returns r.
func (r *Result) RequireTaskTransition(t TestingT, from, to state.Task) *Result {
	t.Helper()
	if r != nil && !r.hasTransition("", string(from), string(to)) {
		t.Fatalf("weftest: task %d never went from %s to %s; its transitions:\n%s", r.Task.ID, stateName(string(from)), to,
			indent(strings.Join(r.Transitions(""), "\n")))
	}
	return r
}

// RequireStep returns the step of that name for checks, failing the test
// if the task has none. The items of a batch step "split" are named
// "split[0]", "split[1]", ….
func (r *Result) RequireStep(t TestingT, name string) *StepAssert {
	t.Helper()
	if r == nil { // Run or Wait failed already, with a t whose Fatalf returns
		return &StepAssert{t: t, failed: true}
	}
	s, ok := r.Step(name)
	if !ok {
		names := make([]string, len(r.Task.Steps))
		for i, s := range r.Task.Steps {
			names[i] = fmt.Sprintf("%q", s.Name)
		}
		t.Fatalf("weftest: task %d has no step %q; its steps are %s", r.Task.ID, name, strings.Join(names, ", "))
		return &StepAssert{t: t, res: r, failed: true}
	}
	return &StepAssert{t: t, res: r, step: s}
}

// Transitions lists the recorded transitions of one step (of the task
// itself when step is ""), oldest first, as "from -> to (reason)" where
// from is "new" for the entry that created it and the reason is left out
// when none was recorded.
func (r *Result) Transitions(step string) []string {
	var out []string
	for _, a := range r.Audit {
		if a.Step != step {
			continue
		}
		line := stateName(a.From) + " -> " + a.To
		if a.Reason != "" {
			line += " (" + a.Reason + ")"
		}
		out = append(out, line)
	}
	return out
}

func stateName(s string) string {
	if s == "" {
		return "new"
	}
	return s
}

func (r *Result) hasTransition(step, from, to string) bool {
	for _, a := range r.Audit {
		if a.Step == step && a.From == from && a.To == to {
			return true
		}
	}
	return false
}

// reason returns the reason recorded with the step's latest transition.
func (r *Result) reason(step string) string {
	for i := len(r.Audit) - 1; i >= 0; i-- {
		if r.Audit[i].Step == step {
			return r.Audit[i].Reason
		}
	}
	return ""
}

// String describes the task: its workflow and state, then one line per
// step with its state, attempts and result or error (or why it was
// skipped, cancelled or expired, or what it waits for). It holds no ids
// or times of finished steps, so it can be printed by examples.
func (r *Result) String() string {
	t := r.Task
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s@%s %s", t.Namespace, t.Workflow, t.Version, t.State)
	withError := false
	for _, s := range t.Steps {
		withError = withError || s.Error != ""
	}
	if t.Error != "" && !withError {
		fmt.Fprintf(&b, ": %s", t.Error)
	}
	name, st := 0, 0
	for _, s := range t.Steps {
		name, st = max(name, len(s.Name)), max(st, len(s.State))
	}
	for _, s := range t.Steps {
		fmt.Fprintf(&b, "\n  %-*s  %-*s  %s", name, s.Name, st, s.State, r.stepDetail(s))
	}
	return b.String()
}

// stepDetail is what String says of one step after its name and state.
func (r *Result) stepDetail(s weft.TaskStep) string {
	parts := []string{fmt.Sprintf("attempts %d/%d", s.Attempts, s.MaxAttempts)}
	if s.Kind == store.KindSignal {
		parts[0] = fmt.Sprintf("signal %q", s.Signal)
	}
	if s.Sub != "" {
		parts = append(parts, s.Sub)
	}
	if s.Progress != nil && s.State == state.StepRunning {
		parts = append(parts, fmt.Sprintf("progress %.0f%% %q", *s.Progress*100, s.ProgressMessage))
	}
	if s.State == state.StepWaiting && s.RunAt != nil {
		parts = append(parts, "runs in "+time.Until(*s.RunAt).Round(time.Millisecond).String())
	}
	if len(s.Result) > 0 {
		parts = append(parts, "result "+clip(string(s.Result)))
	}
	switch {
	case s.Error != "":
		parts = append(parts, "error: "+s.Error)
	case s.State == state.StepSkipped || s.State == state.StepCancelled || s.State == state.StepExpired || s.State == state.StepResolved:
		if why := r.reason(s.Name); why != "" {
			parts = append(parts, "("+why+")")
		}
	}
	return strings.Join(parts, "  ")
}

// describe is String with the task's id, for failure messages.
func (r *Result) describe() string { return indent(fmt.Sprintf("task %d: %s", r.Task.ID, r)) }

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// StepAssert checks one step of a Result. Each method checks one thing,
// failing the test with t.Fatalf when it does not hold, and returns the
// StepAssert so that checks chain:
//
//	res.RequireStep(t, "charge").Completed().Attempts(2).ResultJSON(`{"ok": true}`)
//
// After a check failed (with a t whose Fatalf returns, such as a fake),
// the later checks do nothing.
type StepAssert struct {
	t      TestingT
	res    *Result
	step   weft.TaskStep
	failed bool
}

// Step returns the step's stored record.
func (s *StepAssert) Step() weft.TaskStep { return s.step }

func (s *StepAssert) fail(format string, args ...any) {
	s.t.Helper()
	s.failed = true
	s.t.Fatalf("weftest: step %q of task %d %s\n%s", s.step.Name, s.res.Task.ID, fmt.Sprintf(format, args...), s.res.describe())
}

// State checks the step's state.
func (s *StepAssert) State(want state.Step) *StepAssert {
	s.t.Helper()
	if s.failed || s.step.State == want {
		return s
	}
	why := ""
	switch {
	case s.step.Error != "":
		why = "; its error: " + s.step.Error
	case s.res.reason(s.step.Name) != "":
		why = "; last transition: " + s.res.reason(s.step.Name)
	}
	s.fail("is %s, want %s%s", s.step.State, want, why)
	return s
}

// Completed checks that the step completed.
func (s *StepAssert) Completed() *StepAssert { s.t.Helper(); return s.State(state.StepCompleted) }

// Failed checks that the step failed.
func (s *StepAssert) Failed() *StepAssert { s.t.Helper(); return s.State(state.StepFailed) }

// Skipped checks that the step was skipped.
func (s *StepAssert) Skipped() *StepAssert { s.t.Helper(); return s.State(state.StepSkipped) }

// Attempts checks how many attempts of the step began (a snoozed attempt
// that ran again counts once).
func (s *StepAssert) Attempts(want int) *StepAssert {
	s.t.Helper()
	if !s.failed && s.step.Attempts != want {
		s.fail("made %d attempts, want %d", s.step.Attempts, want)
	}
	return s
}

// ErrorContains checks that the step's recorded error contains sub.
func (s *StepAssert) ErrorContains(sub string) *StepAssert {
	s.t.Helper()
	switch {
	case s.failed:
	case s.step.Error == "":
		s.fail("has no error (it is %s), want one containing %q", s.step.State, sub)
	case !strings.Contains(s.step.Error, sub):
		s.fail("has the error %q, want one containing %q", s.step.Error, sub)
	}
	return s
}

// ResultJSON checks that the step's result equals want as JSON: key order,
// spacing and the way numbers are written do not matter.
func (s *StepAssert) ResultJSON(want string) *StepAssert {
	s.t.Helper()
	s.jsonEqual("result", s.step.Result, want)
	return s
}

// CheckpointJSON checks that the step's last checkpoint equals want as
// JSON, like ResultJSON.
func (s *StepAssert) CheckpointJSON(want string) *StepAssert {
	s.t.Helper()
	s.jsonEqual("checkpoint", s.step.Checkpoint, want)
	return s
}

func (s *StepAssert) jsonEqual(what string, got json.RawMessage, want string) {
	s.t.Helper()
	if s.failed {
		return
	}
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		s.fail("cannot be compared: the %s wanted is not valid JSON (%v): %s", what, err, want)
		return
	}
	if len(got) == 0 {
		s.fail("has no %s (it is %s), want %s", what, s.step.State, compact(want))
		return
	}
	var g any
	if err := json.Unmarshal(got, &g); err != nil || !reflect.DeepEqual(g, w) {
		s.fail("has the %s %s, want %s", what, compact(string(got)), compact(want))
	}
}

func compact(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}

// DecodeResult decodes the step's result into v, a pointer, failing the
// test if the step has no result or it does not decode.
func (s *StepAssert) DecodeResult(v any) *StepAssert {
	s.t.Helper()
	switch {
	case s.failed:
	case len(s.step.Result) == 0:
		s.fail("has no result to decode (it is %s)", s.step.State)
	default:
		if err := json.Unmarshal(s.step.Result, v); err != nil {
			s.fail("has a result that does not decode into %T: %v; the result: %s", v, err, clip(string(s.step.Result)))
		}
	}
	return s
}

// Transition checks that the audit trail records the step going from one
// state to another (from "" for the entry that created it). Note that a
// retry whose delay has already passed when its failure is recorded goes
// from running straight back to ready, without waiting.
func (s *StepAssert) Transition(from, to state.Step) *StepAssert {
	s.t.Helper()
	if !s.failed && !s.res.hasTransition(s.step.Name, string(from), string(to)) {
		s.failed = true
		s.t.Fatalf("weftest: step %q of task %d never went from %s to %s; its transitions:\n%s", s.step.Name, s.res.Task.ID,
			stateName(string(from)), to, indent(strings.Join(s.res.Transitions(s.step.Name), "\n")))
	}
	return s
}
