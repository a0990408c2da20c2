package engine

import (
	"fmt"

	"github.com/weftrun/weft/internal/expr"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file turns a workflow's concurrency and rate limits into the keys
// its steps and tasks carry: the claim (internal/sqlstore) counts what runs
// under each concurrency key and claims only within the limit, and takes a
// token of each rate key's bucket.

// stepLimitKey names the concurrency limit or the rate of one step of a
// workflow, across versions.
func stepLimitKey(w *workflow.Workflow, step string) string {
	return "step:" + w.Namespace + "/" + w.Name + "/" + step
}

// limitKeys are the limits of one workflow that vary per task, with their
// key expressions compiled.
type limitKeys struct {
	task     *workflow.Concurrency
	taskKey  *expr.Key
	stepKeys map[int]*expr.Key // by step index: the steps with a keyed concurrency limit
	rateKeys map[int]*expr.Key // by step index: the steps with a keyed rate
}

// compileLimitKeys returns the limits of w that vary per task: nil when w
// has only fixed step limits and rates (already in its step inserts) or
// none.
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
	var err error
	if l.stepKeys, err = compileStepKeys(w, "concurrency.key", func(st *workflow.Step) string {
		if st.Concurrency == nil {
			return ""
		}
		return st.Concurrency.Key
	}); err != nil {
		return nil, err
	}
	if l.rateKeys, err = compileStepKeys(w, "rate_limit.key", func(st *workflow.Step) string {
		if st.RateLimit == nil {
			return ""
		}
		return st.RateLimit.Key
	}); err != nil {
		return nil, err
	}
	if l.task == nil && l.stepKeys == nil && l.rateKeys == nil {
		return nil, nil
	}
	return &l, nil
}

// compileStepKeys compiles, by step index, the key expression key returns
// for each step ("" for none); field names it in errors.
func compileStepKeys(w *workflow.Workflow, field string, key func(*workflow.Step) string) (map[int]*expr.Key, error) {
	var out map[int]*expr.Key
	for i := range w.Steps {
		src := key(&w.Steps[i])
		if src == "" {
			continue
		}
		k, err := expr.CompileKey(src)
		if err != nil {
			return nil, fmt.Errorf("step %q: %s: %w", w.Steps[i].Name, field, err)
		}
		if out == nil {
			out = map[int]*expr.Key{}
		}
		out[i] = k
	}
	return out, nil
}

// apply sets the keys of one task: its workflow limit on the task and its
// steps, and the keyed step limits and rates from its input. The shared
// step inserts are copied, not changed.
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
	for i, k := range l.rateKeys {
		v, err := k.Eval(in.Input)
		if err != nil {
			return fmt.Errorf("step %q: rate_limit.key: %w", steps[i].Name, err)
		}
		steps[i].RateKey += "=" + v
	}
	return nil
}
