package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/claim"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the Store's claim operations (claims): they run the
// claim planner's work in write transactions, and read and change the
// policies it claims under.

// ClaimSteps claims up to p.Limit ready steps.
func (s *claims) ClaimSteps(ctx context.Context, p store.ClaimParams) ([]store.ClaimedStep, error) {
	return s.plan.Claim(ctx, p, s.claimRun(p))
}

// claimRun runs a claim's transactions as engine p.EngineID.
func (s *claims) claimRun(p store.ClaimParams) claim.Run {
	return func(ctx context.Context, fn func(*claim.ClaimTx) error) error {
		return s.workWrite(ctx, sqldb.Claims, p.EngineID, func(t *transition.Tx) error { return fn(t.Claimer()) })
	}
}

// ExplainFairClaim returns the database's plans for what a claim under
// weights runs: the statement that counts running steps and finds the
// namespaces with ready work, the query of one namespace's part (of
// p.Namespaces[0]), then the question whether namespaces other than that
// one have ready work (FairOthers), so tests and operators can check that
// none reads the ready queue.
func (s *claims) ExplainFairClaim(ctx context.Context, p store.ClaimParams) (string, error) {
	readiness, err := s.explain(ctx, claim.FairReadiness, claim.MaxFairNamespaces)
	if err != nil {
		return "", fmt.Errorf("explain fair claim: %w", err)
	}
	q, args := s.plan.ClaimQuery(max(p.Limit, 1), p, nil, nil)
	part, err := s.explain(ctx, claim.FairPart(q), args...)
	if err != nil {
		return "", fmt.Errorf("explain fair claim: %w", err)
	}
	ns := ""
	if len(p.Namespaces) > 0 {
		ns = p.Namespaces[0]
	}
	others, err := s.explain(ctx, `SELECT `+claim.FairOthers, ns, ns)
	if err != nil {
		return "", fmt.Errorf("explain fair claim: %w", err)
	}
	return readiness + "--\n" + part + "--\n" + others, nil
}

// ListPolicies returns the policies set and the usage of the limits in force.
func (s *claims) ListPolicies(ctx context.Context) (store.PolicyReport, error) {
	rows, err := s.Read(ctx, `SELECT `+claim.PolicyColumns+` FROM policies ORDER BY target`)
	if err != nil {
		return store.PolicyReport{}, fmt.Errorf("list policies: %w", err)
	}
	pols, err := sqldb.Collect(rows, claim.ScanPolicy)
	if err != nil {
		return store.PolicyReport{}, fmt.Errorf("list policies: %w", err)
	}
	var names []any
	for _, p := range pols {
		if ns, name, err := store.ParseTarget(p.Target); err == nil && ns != "" && name == "" {
			names = append(names, ns)
		}
	}
	if len(names) > 0 {
		rows, err := s.Read(ctx, `SELECT namespace, count(*) FROM steps WHERE state = 'running' AND namespace IN (`+sqltx.Placeholders(len(names))+`) GROUP BY namespace`, names...)
		if err != nil {
			return store.PolicyReport{}, fmt.Errorf("count running steps: %w", err)
		}
		running, err := sqldb.Collect(rows, claim.ScanNamespaceRow)
		if err != nil {
			return store.PolicyReport{}, fmt.Errorf("count running steps: %w", err)
		}
		for _, r := range running {
			for i := range pols {
				if pols[i].Target == r.Namespace {
					pols[i].Running = int(r.N)
				}
			}
		}
	}
	report := store.PolicyReport{Policies: pols, Limits: []store.LimitUsage{}}
	if report.Policies == nil {
		report.Policies = []store.Policy{}
	}
	// The limits templates define, for the keys that have work running.
	for _, q := range []string{
		`SELECT limit_key, max(limit_n), count(*) FROM steps WHERE state = 'running' AND limit_key != '' GROUP BY limit_key`,
		// A task's limit is on its steps until it starts; a running task
		// holds one place of it.
		`SELECT limit_key, max(limit_n), count(*) FROM tasks WHERE state = 'running' AND limit_key != '' GROUP BY limit_key`,
	} {
		rows, err := s.Read(ctx, q)
		if err != nil {
			return store.PolicyReport{}, fmt.Errorf("count limit usage: %w", err)
		}
		used, err := sqldb.Collect(rows, func(r sqldb.Row) (store.LimitUsage, error) {
			var u store.LimitUsage
			var limit sql.NullInt64
			err := r.Scan(&u.Key, &limit, &u.Running)
			u.Limit = int(limit.Int64)
			return u, err
		})
		if err != nil {
			return store.PolicyReport{}, fmt.Errorf("count limit usage: %w", err)
		}
		report.Limits = append(report.Limits, used...)
	}
	sort.Slice(report.Limits, func(i, j int) bool { return report.Limits[i].Key < report.Limits[j].Key })
	if err := s.reportRates(ctx, &report); err != nil {
		return store.PolicyReport{}, err
	}
	if report.Breakers, err = s.ListBreakers(ctx); err != nil {
		return store.PolicyReport{}, err
	}
	return report, nil
}

// PolicyChanges returns the most recent policy changes, newest first.
func (s *claims) PolicyChanges(ctx context.Context, limit int) ([]store.PolicyChangeRecord, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.Read(ctx, `SELECT id, at, actor, target, change, reason FROM policy_changes ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("list policy changes: %w", err)
	}
	out, err := sqldb.Collect(rows, func(r sqldb.Row) (store.PolicyChangeRecord, error) {
		var c store.PolicyChangeRecord
		var at int64
		err := r.Scan(&c.ID, &at, &c.Actor, &c.Target, &c.Change, &c.Reason)
		c.At = time.UnixMicro(at)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("list policy changes: %w", err)
	}
	return out, nil
}

// SetPolicy applies a change to one target and audits it.
func (s *claims) SetPolicy(ctx context.Context, c store.PolicyChange) (store.Policy, error) {
	if err := c.Validate(); err != nil {
		return store.Policy{}, err
	}
	var out store.Policy
	err := s.write(ctx, "", func(t *transition.Tx) error {
		at := t.Now
		if !c.At.IsZero() {
			at = c.At.UnixMicro()
		}
		// The version row first: changes of policies are serialised by
		// its lock, and every claim after this commit reads them again.
		if err := t.MovePolicyVersion(); err != nil {
			return err
		}
		var paused, concurrency, weight, rateN, ratePer any
		if c.Paused != nil {
			p := 0
			if *c.Paused {
				p = 1
			}
			paused = p
		}
		if c.Concurrency != nil {
			concurrency = *c.Concurrency
		}
		if c.Weight != nil {
			weight = *c.Weight
			if *c.Weight == 1 {
				weight = 0 // the default, as if never set
			}
		}
		if c.Rate != nil {
			rateN, ratePer = c.Rate.Limit, c.Rate.Per.Microseconds()
		}
		// COALESCE keeps what the change leaves alone.
		_, err := t.Exec(`INSERT INTO policies (target, paused, concurrency, weight, rate_n, rate_per, updated_at, updated_by)
			VALUES (?, COALESCE(?, 0), COALESCE(?, 0), COALESCE(?, 0), COALESCE(?, 0), COALESCE(CAST(? AS BIGINT), 0), ?, ?)
			ON CONFLICT (target) DO UPDATE SET paused = COALESCE(?, policies.paused), concurrency = COALESCE(?, policies.concurrency),
			weight = COALESCE(?, policies.weight), rate_n = COALESCE(?, policies.rate_n), rate_per = COALESCE(CAST(? AS BIGINT), policies.rate_per),
			updated_at = excluded.updated_at, updated_by = excluded.updated_by`,
			c.Target, paused, concurrency, weight, rateN, ratePer, at, c.Actor, paused, concurrency, weight, rateN, ratePer)
		if err != nil {
			return fmt.Errorf("set policy of %s: %w", c.Target, err)
		}
		if err := t.RecordPolicyChange(at, c.Actor, c.Target, c.Describe(), c.Reason); err != nil {
			return err
		}
		// A target with nothing set is forgotten; its audit stays.
		if _, err := t.Exec(`DELETE FROM policies WHERE target = ? AND paused = 0 AND concurrency = 0 AND weight = 0 AND rate_n = 0`, c.Target); err != nil {
			return fmt.Errorf("set policy of %s: %w", c.Target, err)
		}
		if (c.Paused != nil && !*c.Paused) || c.Concurrency != nil || c.Weight != nil || c.Rate != nil {
			// Work may be claimable now: wake the engines, here and (on
			// PostgreSQL) elsewhere, as new ready steps would.
			t.Readied++
		}
		pols, err := t.ReadPolicies(`WHERE target = ?`, c.Target)
		if err != nil {
			return err
		}
		if err := policyTokens(pols, t.Now, t.Query); err != nil {
			return err
		}
		out = store.Policy{Target: c.Target, UpdatedAt: time.UnixMicro(at), UpdatedBy: c.Actor}
		if len(pols) == 1 {
			out = pols[0]
		}
		return nil
	})
	if err != nil {
		return store.Policy{}, err
	}
	return out, nil
}

// HeldPreemptible returns the preemptible steps among held that run under
// engineID with exactly those fences: their id, task, name, namespace,
// handler, priority, fence and workflow. A remote worker's heartbeat lists
// its steps; this is the one read that finds which of them may be
// preempted (by primary key, only for a worker that says it is full).
func (s *claims) HeldPreemptible(ctx context.Context, engineID string, held []store.Fence) ([]store.ClaimedStep, error) {
	if len(held) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(held))
	for i, f := range held {
		ids[i] = f.StepID
	}
	in, inArgs := s.IDIn("s.id", ids)
	rows, err := s.Read(ctx, `SELECT s.id, s.task_id, s.name, s.namespace, s.handler, s.priority, s.attempt, s.lease_id, t.workflow
		FROM steps s JOIN tasks t ON t.id = s.task_id
		WHERE s.engine_id = ? AND s.state = 'running' AND s.preemptible <> 0 AND `+in, append([]any{engineID}, inArgs...)...)
	if err != nil {
		return nil, fmt.Errorf("preemptible steps of %s: %w", engineID, err)
	}
	steps, err := sqldb.Collect(rows, func(r sqldb.Row) (store.ClaimedStep, error) {
		var c store.ClaimedStep
		err := r.Scan(&c.ID, &c.TaskID, &c.Name, &c.Namespace, &c.Handler, &c.Priority, &c.Attempts, &c.Fence.LeaseID, &c.Workflow)
		c.Fence.StepID, c.Fence.Attempt, c.Preemptible, c.State = c.ID, c.Attempts, true, state.StepRunning
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("preemptible steps of %s: %w", engineID, err)
	}
	return slices.DeleteFunc(steps, func(c store.ClaimedStep) bool { return !slices.Contains(held, c.Fence) }), nil
}

// PeekClaim returns the step a claim with p would take first, or nil.
func (s *claims) PeekClaim(ctx context.Context, p store.ClaimParams) (*store.Step, error) {
	return s.plan.Peek(ctx, p, s.claimRun(p))
}
