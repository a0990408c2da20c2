// Package transition holds the state changes of one write transaction:
// inserting tasks and their steps, recording outcomes and carrying them to
// the rest of the task (the DAG cascade, decisions, batches, sub-workflows,
// circuit breakers), durable waits for signals, and what operators and
// engines change besides outcomes (cancel, retry, resolve, release leases,
// policies). Every rule of a task's and a step's lifecycle that is written
// in SQL is here once, for both backends; package sqlstore opens the
// transactions and reads, package claim takes steps in them.
//
// The files follow the operations: submit.go (submitbulk.go, submitrows.go
// the bulk path and the rows both build; supersede.go, tags.go),
// complete.go (recording outcomes), cascade.go (what a step's end does to
// its task and children), dynamic.go (decisions and batches), children.go
// (sub-workflows), breakers.go, signals.go, operator.go, bulk.go,
// leases.go and policies.go.
package transition

import (
	"context"

	"github.com/weftrun/weft/internal/sqlstore/claim"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
)

// Tx is one write transaction (sqltx.Tx) with the operations, by family,
// that write in it.
type Tx struct {
	sqltx.Tx
	// plan is the handle's claim planner, which claims keep state in.
	plan *claim.Planner
	// stepArgs is the arguments buffer of insertTaskSteps' statements.
	stepArgs []any
	// Breakers are outcomes of steps with a circuit breaker, applied
	// before the transaction commits (breakers.go).
	Breakers claim.BreakerWork
	// claim is the claim made in this transaction, if any (claimer).
	claim claim.ClaimTx

	outcomeTx
	submitTx
	operatorTx
}

// The operations of a transaction, by family: each a type of its own, whose
// methods a Tx takes on (they are embedded, wired by New).
type (
	// outcomeTx records outcomes and what they cascade to: complete.go,
	// cascade.go, breakers.go, dynamic.go.
	outcomeTx struct{ *Tx }
	// submitTx inserts tasks and their steps: submit.go, submitbulk.go,
	// submitrows.go, supersede.go, children.go, tags.go.
	submitTx struct{ *Tx }
	// operatorTx is what operators and engines change besides outcomes:
	// operator.go, signals.go, bulk.go, leases.go, policies.go.
	operatorTx struct{ *Tx }
)

// Run applies fn, writes the queued audit rows and, if steps became ready,
// the dialect's notification.
func (t *Tx) Run(fn func(t *Tx) error) error {
	if err := fn(t); err != nil {
		return err
	}
	if err := t.flushBreakers(); err != nil {
		return err
	}
	if err := t.FlushAudit(); err != nil {
		return err
	}
	if (t.LeftReady() || t.Timed) && t.H.Notice.Statement != "" {
		switch {
		case t.Timed:
			// Told at once: a window's later notification says nothing of
			// due times (transactions that write them are few).
		case t.Owned:
			if !t.H.TakeNotify() {
				t.NotifyDeferred = true
				return nil
			}
			t.NotifyTaken = true
		}
		// Nothing reads it: it goes with the COMMIT where it can.
		if err := t.Soon("notify", t.H.Notice.Statement, t.H.Notice.Channel, t.H.NotifyPayload(t.Timed, t.Owned)); err != nil {
			return err
		}
	}
	return nil
}

// Claimer returns the claim of transaction t, made in t's own memory: a
// claim allocates nothing for it.
func (t *Tx) Claimer() *claim.ClaimTx {
	t.claim.Tx, t.claim.Plan, t.claim.Breakers = t.SQL(), t.plan, &t.Breakers
	return &t.claim
}

// New returns a transaction of handle h on x for engine, its operations
// wired to it; claims in it keep their state in plan.
func New(ctx context.Context, x sqldb.Querier, h *sqltx.Handle, plan *claim.Planner, engine string) *Tx {
	t := &Tx{Tx: sqltx.Tx{Ctx: ctx, X: x, H: h, Now: h.Clock().UnixMicro(), Engine: engine}, plan: plan}
	t.outcomeTx.Tx, t.submitTx.Tx, t.operatorTx.Tx = t, t, t
	return t
}

// SQL is the statements and audit of the transaction, which every
// operation shares.
func (t *Tx) SQL() *sqltx.Tx { return &t.Tx }
