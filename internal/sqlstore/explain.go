package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/weftrun/weft/internal/sqlstore/claim"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/store"
)

// This file holds the plans of the store's own queries, for tests and
// operators to check what a query reads.

// ExplainClaim returns the database's plan for the query that selects steps
// to claim, so tests and operators can check that the claim reads the ready
// index in order, whatever the backlog.
func (s *claims) ExplainClaim(ctx context.Context, p store.ClaimParams) (string, error) {
	q, args := s.plan.ClaimQuery(max(p.Limit, 1), p, nil, nil)
	plan, err := s.explain(ctx, q, args...)
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", err)
	}
	return plan, nil
}

// ExplainClaimRun runs the query that selects steps to claim as a claim
// does, in a transaction of the claim's planner settings that is rolled
// back, and returns its plan with what it did where the database tells
// (EXPLAIN ANALYZE on PostgreSQL; the plan alone elsewhere): for operators
// and the bench to see what a claim reads at a given depth. Where a claim
// under no policies claims in the statement that selects its steps
// (unchecked), that statement is the one run.
func (s *claims) ExplainClaimRun(ctx context.Context, p store.ClaimParams) (string, error) {
	return ExplainClaimRunAs(ctx, s.Store, sqldb.Claims, p)
}

// ExplainClaimRunAs is s's ExplainClaimRun in a transaction of work w,
// for tests to check the plan in each kind of transaction that claims
// (w.Claiming): the claim loop's, and a batch of outcomes' that claims the
// steps it made ready. A function, not a method: the stores' API does not
// name sqldb.Work.
func ExplainClaimRunAs(ctx context.Context, s *Store, w sqldb.Work, p store.ClaimParams) (string, error) {
	prefix := s.Dialect.ExplainAnalyze()
	if prefix == "" {
		prefix, _ = s.Dialect.Explain()
	}
	// On a connection of work w, under its planner settings.
	tx, err := s.begin(ctx, w)
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// The policy version, for the claim statement's gate.
	var version int64
	if err := tx.QueryRow(ctx, s.Bind(`SELECT `+claim.PolicyVersion)).Scan(&version); err != nil {
		return "", fmt.Errorf("explain claim: %w", err)
	}
	q, args := s.plan.ClaimQuery(max(p.Limit, 1), p, nil, nil)
	if s.Dialect.WithWrites() {
		x := s.newTxn(ctx, tx, p.EngineID)
		x.Work = w
		t := x.Claimer()
		st, err := t.ClaimStatement(claim.ClaimFrom{Candidates: q, Args: args, Version: version}, 1)
		if err != nil {
			return "", fmt.Errorf("explain claim: %w", err)
		}
		q, args = st.Query, st.Args
	}
	rows, err := tx.Query(ctx, s.Bind(prefix+" "+q), args...)
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", err)
	}
	plan, err := s.planLines(rows)
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", err)
	}
	return plan, nil
}

// explain returns the database's plan for a query, one line per row.
func (s *claims) explain(ctx context.Context, q string, args ...any) (string, error) {
	prefix, _ := s.Dialect.Explain()
	rows, err := s.Read(ctx, prefix+" "+q, args...)
	if err != nil {
		return "", err
	}
	return s.planLines(rows)
}

// planLines reads the rows of an EXPLAIN, the plan line last in each.
func (s *claims) planLines(rows sqldb.Rows) (string, error) {
	_, columns := s.Dialect.Explain()
	vals := make([]any, max(columns, 1))
	ptrs := make([]any, len(vals))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	lines, err := sqldb.Collect(rows, func(r sqldb.Row) (string, error) {
		if err := r.Scan(ptrs...); err != nil {
			return "", err
		}
		// The plan line is the last column.
		return fmt.Sprint(vals[len(vals)-1]), nil
	})
	if err != nil {
		return "", err
	}
	var plan strings.Builder
	for _, l := range lines {
		plan.WriteString(l)
		plan.WriteByte('\n')
	}
	return plan.String(), nil
}
