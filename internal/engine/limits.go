package engine

import (
	"fmt"

	"github.com/weftrun/weft/internal/expr"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file turns a workflow's concurrency limits into the keys its steps
// and tasks carry: the claim (internal/sqlstore) counts what runs under each
// key and claims only within the limit.

// stepLimitKey names the limit of one step of a workflow, across versions.
func stepLimitKey(w *workflow.Workflow, step string) string {
	return "step:" + w.Namespace + "/" + w.Name + "/" + step
}

// limitKeys are the concurrency limits of one workflow, with their key
// expressions compiled.
type limitKeys struct {
	task     *workflow.Concurrency
	taskKey  *expr.Key
	stepKeys map[int]*expr.Key // by step index: the steps with a keyed limit
}

// compileLimitKeys returns the limits of w that vary per task: nil when w
// has only fixed step limits (already in its step inserts) or none.
func compileLimitKeys(w *workflow.Workflow) (*limitKeys, error) {
	var l limitKeys
	if c := w.Concurrency; c != nil {
		l.task = c
		if c.Key != "" {
			k, err := expr.CompileKey(c.Key)
			if err != nil {
				return nil, fmt.Errorf("concurrency.key: %w", err)
			}
			l.taskKey = k
		}
	}
	for i, st := range w.Steps {
		if st.Concurrency == nil || st.Concurrency.Key == "" {
			continue
		}
		k, err := expr.CompileKey(st.Concurrency.Key)
		if err != nil {
			return nil, fmt.Errorf("step %q: concurrency.key: %w", st.Name, err)
		}
		if l.stepKeys == nil {
			l.stepKeys = map[int]*expr.Key{}
		}
		l.stepKeys[i] = k
	}
	if l.task == nil && l.stepKeys == nil {
		return nil, nil
	}
	return &l, nil
}

// apply sets the keys of one task: its workflow limit on the task and its
// steps, and the keyed step limits from its input. The shared step inserts
// are copied, not changed.
func (l *limitKeys) apply(in *store.TaskInsert) error {
	if l == nil {
		return nil
	}
	steps := make([]store.StepInsert, len(in.Steps))
	copy(steps, in.Steps)
	in.Steps = steps
	if l.task != nil {
		key := "workflow:" + in.Namespace + "/" + in.Workflow // see stepLimitKey
		if l.taskKey != nil {
			v, err := l.taskKey.Eval(in.Input)
			if err != nil {
				return fmt.Errorf("concurrency.key: %w", err)
			}
			key += "=" + v
		}
		in.LimitKey, in.Limit = key, l.task.Limit
	}
	for i, k := range l.stepKeys {
		v, err := k.Eval(in.Input)
		if err != nil {
			return fmt.Errorf("step %q: concurrency.key: %w", steps[i].Name, err)
		}
		steps[i].LimitKey += "=" + v
	}
	return nil
}
