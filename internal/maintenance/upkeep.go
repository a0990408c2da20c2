package maintenance

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file holds the upkeep the leader runs every UpkeepInterval:
// retention (deleting finished tasks past their workflow's or namespace's
// retention, in small batches) and the count of tasks that need attention.

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

// upkeepRound runs the upkeep when it is due (leader only).
func (l *Leader) upkeepRound(ctx context.Context) {
	now := time.Now()
	if now.Sub(l.upkeep.last) < l.cfg.UpkeepInterval {
		return
	}
	l.upkeep.last = now
	rules, err := l.retentionRules(ctx)
	if err != nil {
		l.logErr(ctx, "retention", err)
	} else {
		if _, err := l.applyRetention(ctx, now, rules); err != nil {
			l.logErr(ctx, "retention", err)
		}
		l.rollHistory(ctx, rules)
	}
	if _, err := l.store.PruneRates(ctx, now); err != nil {
		l.logErr(ctx, "prune rate buckets", err)
	}
	n, err := l.store.CountTasks(ctx, store.TaskFilter{Attention: true, StaleAfter: l.cfg.StaleAfter})
	if err != nil {
		l.logErr(ctx, "attention", err)
		return
	}
	if !l.upkeep.counted || n != l.upkeep.attention {
		l.upkeep.counted, l.upkeep.attention = true, n
		if n > 0 {
			l.log.Warn("tasks need attention", "count", n)
		}
		l.cfg.Events.Publish(event.Event{Kind: event.Attention, Count: n})
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
func (l *Leader) retentionRules(ctx context.Context) ([]retentionRule, error) {
	recs, err := l.store.ListWorkflows(ctx)
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
	set, err := l.store.Retentions(ctx)
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
func (l *Leader) ApplyRetention(ctx context.Context, now time.Time) (int, error) {
	rules, err := l.retentionRules(ctx)
	if err != nil {
		return 0, err
	}
	return l.applyRetention(ctx, now, rules)
}

func (l *Leader) applyRetention(ctx context.Context, now time.Time, rules []retentionRule) (int, error) {
	total := 0
	for _, r := range rules {
		q := store.FinishedQuery{State: r.state, FinishedBefore: now.Add(-r.keep), Namespace: r.namespace, Workflow: r.workflow,
			ExceptWorkflows: r.except, Limit: retentionBatch}
		deleted := 0
		for range retentionBatches {
			ids, err := l.store.FinishedTasks(ctx, q)
			if err != nil {
				return total, err
			}
			if len(ids) == 0 {
				break
			}
			res, err := l.store.DeleteTasks(ctx, store.DeleteParams{IDs: ids, Actor: l.cfg.ID(), Retention: true})
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
			l.log.Info("retention deleted tasks", "namespace", r.namespace, "workflow", r.workflow, "state", r.state, "count", deleted)
			l.cfg.Events.Publish(event.Event{Kind: event.Pruned, Namespace: r.namespace, Workflow: r.workflow, Count: deleted})
		}
	}
	return total, nil
}

// historyWindow is how long the audit trail stays in its time partitions
// with no retention longer: a partition that ended longer ago is dropped,
// the rows of tasks still kept moved out of it first.
const historyWindow = 30 * 24 * time.Hour

// rollHistory, on a store that keeps the audit trail in time partitions,
// creates those ahead and drops those past the longest retention (at most
// historyWindow): by then retention has deleted most of their tasks.
func (l *Leader) rollHistory(ctx context.Context, rules []retentionRule) {
	r, ok := l.store.(store.HistoryRoller)
	if !ok {
		return
	}
	window := windowOf(rules)
	roll, err := r.RollHistory(ctx, window)
	if len(roll.Created) > 0 || len(roll.Dropped) > 0 {
		l.log.Info("history partitions rolled", "created", roll.Created, "dropped", roll.Dropped, "moved_rows", roll.Moved, "window", window)
	}
	if err != nil {
		l.logErr(ctx, "roll history partitions", err)
	}
}

// windowOf is the window of the history partitions under rules: the
// longest retention, at most historyWindow, which is also the window
// without any.
func windowOf(rules []retentionRule) time.Duration {
	window := time.Duration(0)
	for _, rule := range rules {
		window = max(window, rule.keep)
	}
	if window == 0 || window > historyWindow {
		return historyWindow
	}
	return window
}
