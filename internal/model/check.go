package model

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// The invariant checkers, as functions of what was observed, so that each
// is tested on hand-made histories.

// IDTracker remembers every task and step id ever seen with what it named,
// and reports an id that comes back naming something else.
type IDTracker struct {
	tasks map[int64]string
	steps map[int64]string
}

// Task records task id as the task of workflow created at created.
func (t *IDTracker) Task(id int64, workflow string, created time.Time) error {
	if t.tasks == nil {
		t.tasks = map[int64]string{}
	}
	who := fmt.Sprintf("%s created %s", workflow, created.UTC().Format(time.RFC3339Nano))
	if was, ok := t.tasks[id]; ok && was != who {
		return fmt.Errorf("task id %d reused: it was %s, it is now %s", id, was, who)
	}
	t.tasks[id] = who
	return nil
}

// Step records step id as step name of task taskID.
func (t *IDTracker) Step(id, taskID int64, name string) error {
	if t.steps == nil {
		t.steps = map[int64]string{}
	}
	who := fmt.Sprintf("step %s of task %d", name, taskID)
	if was, ok := t.steps[id]; ok && was != who {
		return fmt.Errorf("step id %d reused: it was %s, it is now %s", id, was, who)
	}
	t.steps[id] = who
	return nil
}

// Env is what the model knows of the cluster when it classifies tasks.
type Env struct {
	Now     time.Time
	Paused  map[string]bool // namespaces paused
	Limited map[string]bool // namespaces with a concurrency limit
	// RemoteServed: a remote worker serves remote.work now.
	RemoteServed bool
	// Live are the engines and remote workers live now (ListEngines); nil
	// when unknown, and then no running step is checked for its holder.
	Live map[string]bool
}

// TaskWait is why an open task waits, as Classify sees it: Reason names
// it ("" when the model can name none), and Ready lists the ready steps
// a live engine serves, which must be claimed within the bound.
type TaskWait struct {
	Task   int64
	Reason string
	Ready  []ReadyStep
	// Unheld lists the running steps whose holder is not live (declared
	// dead, or stopped): the reaper must take them back within the bound.
	Unheld []UnheldStep
	Detail string // the steps' states, for reports
}

// UnheldStep is a running step whose holder is not live.
type UnheldStep struct {
	ID      int64
	Name    string
	Attempt int
	Holder  string // the engine or worker it runs under
}

// TaskStateAgrees returns what is wrong when task t's state disagrees with
// its steps (empty when it agrees): a pending task has no step that began
// (running, or waiting for a signal), so that a task waiting for a signal
// reads running wherever the wait is, first step or not.
func TaskStateAgrees(t *store.Task) string {
	if t.State != state.TaskPending {
		return ""
	}
	for _, s := range t.Steps {
		if s.State == state.StepRunning || (s.State == state.StepWaiting && s.Kind == store.KindSignal) {
			return fmt.Sprintf("task %d (%s/%s) is pending, though its step %s is %s", t.ID, t.Namespace, t.Workflow, s.Name, s.State)
		}
	}
	return ""
}

// ReadyStep is a ready step that nothing holds back.
type ReadyStep struct {
	ID      int64
	Name    string
	Attempt int
	Kind    string
}

// Classify names why an open task waits: a step running or waiting (a
// signal, a child task, a timer), a ready step held back by a pause, a
// limit, a retry's backoff or a handler no live worker serves. Ready steps
// that nothing holds back are listed: the engines must claim them.
func Classify(t *store.Task, env Env) TaskWait {
	w := TaskWait{Task: t.ID}
	var states []string
	for _, s := range t.Steps {
		states = append(states, fmt.Sprintf("%s=%s", s.Name, s.State))
	}
	w.Detail = fmt.Sprintf("task %d (%s/%s) %s: steps %s", t.ID, t.Namespace, t.Workflow, t.State, strings.Join(states, " "))
	held := func(ns string) string {
		switch {
		case env.Paused[ns]:
			return "paused"
		case env.Limited[ns]:
			return "limited"
		}
		return ""
	}
	if t.State == state.TaskPending {
		switch {
		case t.RunAt.After(env.Now):
			w.Reason = "timer"
		case held(t.Namespace) != "":
			w.Reason = held(t.Namespace)
		default:
			w.Reason = "starting" // the task starts with its first steps
		}
		return w
	}
	for _, s := range t.Steps {
		switch s.State {
		case state.StepRunning:
			w.Reason = "running"
			if env.Live != nil && !env.Live[s.EngineID] {
				w.Unheld = append(w.Unheld, UnheldStep{ID: s.ID, Name: s.Name, Attempt: s.Attempts, Holder: s.EngineID})
			}
		case state.StepWaiting:
			switch s.Kind {
			case store.KindSignal:
				w.Reason = "signal"
			case store.KindWorkflow:
				w.Reason = "child"
			case store.KindFunction:
				w.Reason = "calls" // its calls, which are classified in turn
			default:
				w.Reason = "timer"
			}
		case state.StepReady:
			switch {
			case s.RunAt != nil && s.RunAt.After(env.Now):
				w.Reason = "timer"
			case held(s.Namespace) != "":
				w.Reason = held(s.Namespace)
			case s.Handler == "remote.work" && !env.RemoteServed:
				w.Reason = "unserved"
			default:
				w.Ready = append(w.Ready, ReadyStep{ID: s.ID, Name: s.Name, Attempt: s.Attempts, Kind: s.Kind})
			}
		}
	}
	if w.Reason == "" && len(w.Ready) > 0 {
		w.Reason = "ready"
	}
	return w
}

// WaitTracker follows classified tasks over time: a task the model can
// name no reason for, a ready step nothing holds back, or a running step
// whose holder is not live, for longer than Bound is a violation
// (reported once).
type WaitTracker struct {
	Bound       time.Duration
	unexplained map[int64]time.Time
	ready       map[string]time.Time // "STEP ATTEMPT": since
	reported    map[string]bool
}

// Observe takes one observation of every open task (tasks not listed
// ended) and returns the violations it shows.
func (w *WaitTracker) Observe(now time.Time, tasks []TaskWait) []Violation {
	return w.observe(now, tasks, false)
}

// ObserveSaturated is Observe for an observation taken while every slot
// of the live engines was busy: the ready steps' clocks start again.
func (w *WaitTracker) ObserveSaturated(now time.Time, tasks []TaskWait) []Violation {
	return w.observe(now, tasks, true)
}

func (w *WaitTracker) observe(now time.Time, tasks []TaskWait, saturated bool) []Violation {
	if w.unexplained == nil {
		w.unexplained, w.ready, w.reported = map[int64]time.Time{}, map[string]time.Time{}, map[string]bool{}
	}
	var out []Violation
	seenT := map[int64]bool{}
	seenS := map[string]bool{}
	for _, t := range tasks {
		if t.Reason == "" {
			seenT[t.Task] = true
			since, ok := w.unexplained[t.Task]
			if !ok {
				w.unexplained[t.Task] = now
			} else if now.Sub(since) > w.Bound && !w.reported[fmt.Sprint("t", t.Task)] {
				w.reported[fmt.Sprint("t", t.Task)] = true
				out = append(out, Violation{Invariant: InvStranded, Detail: fmt.Sprintf("for %s the model names no reason why it waits: %s", now.Sub(since).Round(time.Millisecond), t.Detail)})
			}
		}
		for _, s := range t.Ready {
			key := fmt.Sprintf("%d %d", s.ID, s.Attempt)
			seenS[key] = true
			since, ok := w.ready[key]
			if !ok || saturated {
				w.ready[key] = now
			} else if now.Sub(since) > w.Bound && !w.reported[key] {
				w.reported[key] = true
				kind := s.Kind
				if kind == "" {
					kind = "handler"
				}
				out = append(out, Violation{Invariant: InvUnclaimed, Detail: fmt.Sprintf("step %s (id %d, %s) ready and served for %s, never claimed: %s", s.Name, s.ID, kind, now.Sub(since).Round(time.Millisecond), t.Detail)})
			}
		}
		for _, s := range t.Unheld {
			// Not restarted by a saturated look: no slot frees it.
			key := fmt.Sprintf("u %d %d", s.ID, s.Attempt)
			seenS[key] = true
			since, ok := w.ready[key]
			if !ok {
				w.ready[key] = now
			} else if now.Sub(since) > w.Bound && !w.reported[key] {
				w.reported[key] = true
				out = append(out, Violation{Invariant: InvUnheld, Detail: fmt.Sprintf("step %s (id %d) attempt %d running for %s under %s, which is not live, never reclaimed: %s", s.Name, s.ID, s.Attempt, now.Sub(since).Round(time.Millisecond), s.Holder, t.Detail)})
			}
		}
	}
	for id := range w.unexplained {
		if !seenT[id] {
			delete(w.unexplained, id)
		}
	}
	for k := range w.ready {
		if !seenS[k] {
			delete(w.ready, k)
		}
	}
	return out
}

// AuditAgrees checks that a task's audit trail ends each step in the
// state the step is in, and the task in its state. The trail lists
// transitions by id, and a claim is recorded after it happened (at its
// run's end or the next heartbeat) with the time it happened, while on
// PostgreSQL a transition's time is its transaction's start: neither the
// id order nor the time order is the order of events alone. The last
// transition by id or the last by time must be to the current state.
func AuditAgrees(t *store.Task, audit []store.AuditEntry) []string {
	type ends struct{ byID, byTime *store.AuditEntry }
	last := map[string]*ends{}
	for i := range audit {
		e := &audit[i]
		l := last[e.Step]
		if l == nil {
			l = &ends{}
			last[e.Step] = l
		}
		if l.byID == nil || e.ID >= l.byID.ID {
			l.byID = e
		}
		if l.byTime == nil || !e.At.Before(l.byTime.At) {
			l.byTime = e
		}
	}
	agree := func(l *ends, st string) bool { return l.byID.To == st || l.byTime.To == st }
	var out []string
	if l := last[""]; l != nil && !agree(l, string(t.State)) {
		out = append(out, fmt.Sprintf("task %d is %s, its audit trail's last transition is %s→%s", t.ID, t.State, l.byTime.From, l.byTime.To))
	}
	for _, s := range t.Steps {
		l, ok := last[s.Name]
		if !ok {
			continue // never moved (pending steps of an ended task)
		}
		if !agree(l, string(s.State)) {
			out = append(out, fmt.Sprintf("task %d step %s is %s, its audit trail's last transition is %s→%s", t.ID, s.Name, s.State, l.byTime.From, l.byTime.To))
		}
	}
	slices.Sort(out)
	return out
}
