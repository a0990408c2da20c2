package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file holds the upkeep the maintenance leader runs every
// UpkeepInterval: retention (deleting finished tasks past their workflow's
// or namespace's retention, in small batches) and the count of tasks that
// need attention; and the handlers an engine advertises.

// retentionBatch is how many tasks one retention transaction deletes, and
// retentionBatches how many batches one rule takes per upkeep round, so
// that a backlog is worked off over several rounds without long locks or a
// long round.
const (
	retentionBatch   = 200
	retentionBatches = 25
)

// upkeepState is what the upkeep remembers between rounds.
type upkeepState struct {
	last      time.Time
	attention int
	counted   bool
}

// engineInfo is this engine's registration, with the handlers it serves.
func (e *Engine) engineInfo(id string) store.EngineInfo {
	e.mu.Lock()
	names := e.names
	e.namesChanged = false
	e.mu.Unlock()
	return store.EngineInfo{ID: id, Host: e.host, PID: os.Getpid(), StartedAt: time.Now(), Handlers: advertised(names)}
}

// advertised is what an engine serving names advertises: "*" when it
// claims any handler (no names registered restricts nothing).
func advertised(names []string) []string {
	if len(names) == 0 {
		return []string{"*"}
	}
	return names
}

// advertise records the handlers registered since the engine last
// advertised them.
func (e *Engine) advertise(ctx context.Context, id string) {
	e.mu.Lock()
	changed, names := e.namesChanged, e.names
	e.namesChanged = false
	e.mu.Unlock()
	if !changed {
		return
	}
	if err := e.store.SetHandlers(ctx, id, advertised(names)); err != nil {
		e.mu.Lock()
		e.namesChanged = true // try again at the next heartbeat
		e.mu.Unlock()
		e.log.Warn("advertise handlers", "engine_id", id, "error", err)
	}
}

// upkeepRound runs the upkeep when it is due (leader only).
func (e *Engine) upkeepRound(ctx context.Context) {
	now := time.Now()
	if now.Sub(e.upkeep.last) < e.cfg.UpkeepInterval {
		return
	}
	e.upkeep.last = now
	if _, err := e.ApplyRetention(ctx, now); err != nil {
		e.logErr(ctx, "retention", err)
	}
	if _, err := e.store.PruneRates(ctx, now); err != nil {
		e.logErr(ctx, "prune rate buckets", err)
	}
	n, err := e.store.CountTasks(ctx, store.TaskFilter{Attention: true, StaleAfter: e.cfg.StaleAfter})
	if err != nil {
		e.logErr(ctx, "attention", err)
		return
	}
	if !e.upkeep.counted || n != e.upkeep.attention {
		e.upkeep.counted, e.upkeep.attention = true, n
		if n > 0 {
			e.log.Warn("tasks need attention", "count", n)
		}
		e.events.Publish(event.Event{Kind: event.Attention, Count: n})
	}
}

// retentionRule is one retention to apply.
type retentionRule struct {
	namespace, workflow string
	state               state.Task
	keep                time.Duration
	except              []string // for a namespace rule: workflows with their own
}

// retentionRules gathers the retentions of the newest version of each
// workflow and those set on namespaces.
func (e *Engine) retentionRules(ctx context.Context) ([]retentionRule, error) {
	recs, err := e.store.ListWorkflows(ctx)
	if err != nil {
		return nil, err
	}
	newest := map[string]store.WorkflowRecord{}
	for _, r := range recs {
		k := r.Namespace + "/" + r.Name
		if cur, ok := newest[k]; !ok || store.CompareVersions(r.Version, cur.Version) > 0 {
			newest[k] = r
		}
	}
	var rules []retentionRule
	own := map[string][]string{} // namespace/state -> workflows with their own retention
	keys := make([]string, 0, len(newest))
	for k := range newest {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r := newest[k]
		var w struct {
			Retention *workflow.Retention `json:"retention"`
		}
		if err := json.Unmarshal(r.Definition, &w); err != nil {
			return nil, fmt.Errorf("decode workflow %s@%s: %w", k, r.Version, err)
		}
		for st, keep := range w.Retention.ByState() {
			rules = append(rules, retentionRule{namespace: r.Namespace, workflow: r.Name, state: state.Task(st), keep: keep})
			own[r.Namespace+"/"+st] = append(own[r.Namespace+"/"+st], r.Name)
		}
	}
	set, err := e.store.Retentions(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range set {
		rules = append(rules, retentionRule{namespace: r.Namespace, state: r.State, keep: r.Keep, except: own[r.Namespace+"/"+string(r.State)]})
	}
	return rules, nil
}

// ApplyRetention deletes the finished tasks past their retention, in small
// batches (a bounded number per rule per call; the next call goes on), and
// returns how many it deleted.
func (e *Engine) ApplyRetention(ctx context.Context, now time.Time) (int, error) {
	rules, err := e.retentionRules(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, r := range rules {
		q := store.FinishedQuery{State: r.state, FinishedBefore: now.Add(-r.keep), Namespace: r.namespace, Workflow: r.workflow,
			ExceptWorkflows: r.except, Limit: retentionBatch}
		deleted := 0
		for range retentionBatches {
			ids, err := e.store.FinishedTasks(ctx, q)
			if err != nil {
				return total, err
			}
			if len(ids) == 0 {
				break
			}
			res, err := e.store.DeleteTasks(ctx, store.DeleteParams{IDs: ids, Actor: e.ID()})
			if err != nil {
				return total, err
			}
			deleted += len(res.Done)
			if len(ids) < retentionBatch {
				break
			}
		}
		if deleted > 0 {
			total += deleted
			e.log.Info("retention deleted tasks", "namespace", r.namespace, "workflow", r.workflow, "state", r.state, "count", deleted)
			e.events.Publish(event.Event{Kind: event.Pruned, Namespace: r.namespace, Workflow: r.workflow, Count: deleted})
		}
	}
	return total, nil
}

// SetRetention sets (keep > 0) or clears (keep == 0) how long the finished
// tasks of a namespace in one state are kept, recorded in the operator log
// as actor's change.
func (e *Engine) SetRetention(ctx context.Context, namespace string, st state.Task, keep time.Duration, actor string) error {
	if !workflow.ValidName(namespace) {
		return fmt.Errorf("%w retention: namespace %q: use letters, digits, '_', '.' and '-'", store.ErrInvalid, namespace)
	}
	switch st {
	case state.TaskCompleted, state.TaskFailed, state.TaskCancelled, state.TaskExpired:
	default:
		return fmt.Errorf("%w retention: %q is not a final task state (completed, failed, cancelled, expired)", store.ErrInvalid, st)
	}
	if keep < 0 {
		return fmt.Errorf("%w retention: a duration cannot be negative", store.ErrInvalid)
	}
	if err := e.requireRetentionNamespace(ctx, namespace); err != nil {
		return err
	}
	if actor == "" {
		actor = e.ID()
	}
	if err := e.store.SetRetention(ctx, store.Retention{Namespace: namespace, State: st, Keep: keep, UpdatedBy: actor}); err != nil {
		return fmt.Errorf("weft: set retention: %w", err)
	}
	return nil
}

// Retentions lists the namespace retentions set.
func (e *Engine) Retentions(ctx context.Context) ([]store.Retention, error) {
	return e.store.Retentions(ctx)
}

// OperatorLog returns the newest entries of the operator log.
func (e *Engine) OperatorLog(ctx context.Context, limit int) ([]store.OperatorEntry, error) {
	return e.store.OperatorLog(ctx, limit)
}

// ListWorkers returns the live engines and remote workers with their
// handlers, held steps and last heartbeat.
func (e *Engine) ListWorkers(ctx context.Context) ([]store.EngineInfo, error) {
	return e.store.ListWorkers(ctx)
}

// StaleAfter is the engine's attention threshold for ready steps nobody
// serves.
func (e *Engine) StaleAfter() time.Duration { return e.cfg.StaleAfter }
