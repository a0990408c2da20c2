package transition

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds what makes a task's graph change as it runs: decisions
// that choose branches and batches that create their items.

// dynamicOutcome applies what a finished step's outcome changes in its
// task's graph, before its children are told it ended: a decision skips
// the children it did not choose; a batch creates its items.
func (t *outcomeTx) dynamicOutcome(o store.Outcome, taskID int64, name, children string, to state.Step) error {
	if to != state.StepCompleted {
		return nil
	}
	if o.Decide {
		if err := t.decide(taskID, name, children, o.Branches); err != nil {
			return err
		}
	}
	if o.Spawn != nil {
		return t.spawn(o.Fence.StepID, taskID, name, children, o.Spawn)
	}
	return nil
}

// decide skips the pending children of a decision that it did not choose;
// the chosen ones learn of its success from stepEnded like any child.
func (t *outcomeTx) decide(taskID int64, name, children string, branches []string) error {
	idx := sqltx.ParseIdx(children)
	if len(idx) == 0 {
		return nil
	}
	args := []any{taskID}
	for _, i := range idx {
		args = append(args, i)
	}
	rows, err := t.Query(`SELECT id, name, children FROM steps WHERE task_id = ? AND state = 'pending' AND idx IN (`+sqltx.Placeholders(len(idx))+`) ORDER BY idx`, args...)
	if err != nil {
		return fmt.Errorf("branches of decision %q: %w", name, err)
	}
	pending, err := sqldb.Collect(rows, sqltx.ScanStepRef)
	if err != nil {
		return fmt.Errorf("branches of decision %q: %w", name, err)
	}
	reason := fmt.Sprintf("not chosen by decision %q", name)
	for _, c := range pending {
		if slices.Contains(branches, c.Name) {
			continue
		}
		moved, err := t.MoveStep(c.ID, taskID, c.Name, state.StepPending, state.StepSkipped, 0, reason, `finished_at = ?`, t.Now)
		if err != nil {
			return err
		}
		if moved {
			if err := t.StepEnded(taskID, c.Name, c.Children, state.StepSkipped, ""); err != nil {
				return err
			}
		}
	}
	return nil
}

// spawnTooLarge returns why the batch would make its task exceed its step
// limit, or "".
func (t *outcomeTx) spawnTooLarge(stepID int64, sp *store.Spawn) (string, error) {
	if sp.MaxSteps <= 0 {
		return "", nil
	}
	var n int
	if err := t.QueryRow(`SELECT count(*) FROM steps WHERE task_id = (SELECT task_id FROM steps WHERE id = ?)`, stepID).Scan(&n); err != nil {
		return "", fmt.Errorf("count steps of the task of step %d: %w", stepID, err)
	}
	if n+len(sp.Items) > sp.MaxSteps {
		return fmt.Sprintf("batch of %d items would give the task %d steps, more than its limit of %d (limits.max_steps)",
			len(sp.Items), n+len(sp.Items), sp.MaxSteps), nil
	}
	return "", nil
}

// itemsPerInsert bounds the rows of one multi-row insert of items (19
// parameters each, well under every backend's limit).
const itemsPerInsert = 256

// spawn creates the items of a completed batch step: ready steps after the
// task's last one, each run by the template, with the batch step's
// children as theirs. The children count them among their dependencies.
func (t *outcomeTx) spawn(stepID, taskID int64, name, children string, sp *store.Spawn) error {
	var batchIdx, next, prio int
	var namespace, wf string
	err := t.QueryRow(`SELECT s.idx, s.namespace, s.workflow, t.priority, (SELECT max(idx) + 1 FROM steps WHERE task_id = s.task_id)
		FROM steps s JOIN tasks t ON t.id = s.task_id WHERE s.id = ?`, stepID).Scan(&batchIdx, &namespace, &wf, &prio, &next)
	if err != nil {
		return fmt.Errorf("batch %q of task %d: %w", name, taskID, err)
	}
	n := len(sp.Items)
	if n == 0 {
		return nil
	}
	tpl := sp.Template
	prio += tpl.Priority
	maxAttempts := max(tpl.MaxAttempts, 1)
	ttl := tpl.TTL.Microseconds()
	timeout := max(tpl.Timeout.Microseconds(), 0)
	var expires any
	if ttl > 0 {
		expires = t.Now + ttl
	}
	sortKey := t.Now - int64(prio)*t.H.Aging
	const cols = 19
	for start := 0; start < n; start += itemsPerInsert {
		end := min(start+itemsPerInsert, n)
		args := make([]any, 0, cols*(end-start))
		for i := start; i < end; i++ {
			item := sp.Items[i]
			if len(item) == 0 {
				item = json.RawMessage("null")
			}
			args = append(args, taskID, next+i, fmt.Sprintf("%s[%d]", name, i), tpl.Handler, namespace, string(state.StepReady), "", children,
				prio, sortKey, maxAttempts, ttl, expires, store.KindItem, batchIdx, tpl.Name, string(item), timeout, wf)
		}
		row := "(" + sqltx.Placeholders(cols) + ")"
		q := `INSERT INTO steps (task_id, idx, name, handler, namespace, state, deps, children, priority, sort_key, max_attempts, ttl, expires_at,
			kind, batch_of, template, item, run_timeout, workflow) VALUES ` + strings.Repeat(row+", ", end-start-1) + row
		if _, err := t.Exec(q, args...); err != nil {
			return fmt.Errorf("create items %d to %d of batch %q of task %d: %w", start, end-1, name, taskID, err)
		}
	}
	reason := fmt.Sprintf("created by batch %q", name)
	for i := range n {
		t.Audit(taskID, fmt.Sprintf("%s[%d]", name, i), "", string(state.StepReady), 0, reason)
	}
	t.Readied += n
	if _, err := t.Exec(`UPDATE tasks SET remaining = remaining + ? WHERE id = ?`, n, taskID); err != nil {
		return fmt.Errorf("count items of batch %q of task %d: %w", name, taskID, err)
	}
	if idx := sqltx.ParseIdx(children); len(idx) > 0 {
		args := []any{n, taskID}
		for _, i := range idx {
			args = append(args, i)
		}
		if _, err := t.Exec(`UPDATE steps SET deps_extra = deps_extra + ? WHERE task_id = ? AND idx IN (`+sqltx.Placeholders(len(idx))+`)`, args...); err != nil {
			return fmt.Errorf("add items of batch %q to its children: %w", name, err)
		}
	}
	return nil
}
