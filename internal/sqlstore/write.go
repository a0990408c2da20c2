package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/claim"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/store"
)

// txn is one write transaction (Tx) with the operations, by family, that
// write in it.
type txn struct {
	sqltx.Tx
	s *Store
	// stepArgs is the arguments buffer of insertTaskSteps' statements.
	stepArgs []any
	// breakers are outcomes of steps with a circuit breaker, applied
	// before the transaction commits (breakers.go).
	breakers claim.BreakerWork
	// claim is the claim made in this transaction, if any (claimer).
	claim claim.ClaimTx

	outcomeTx
	submitTx
	operatorTx
}

// The operations of a transaction, by family: each a type of its own, whose
// methods a txn takes on (they are embedded, wired by newTxn).
type (
	// outcomeTx records outcomes and what they cascade to: complete.go,
	// cascade.go, breakeroutcomes.go, dynamic.go, claimed.go (the
	// results runs leave for the steps that depend on them).
	outcomeTx struct{ *txn }
	// submitTx inserts tasks and their steps: submit.go, submitbulk.go,
	// submitrows.go, supersede.go, children.go, tags.go.
	submitTx struct{ *txn }
	// operatorTx is what operators and engines change besides outcomes:
	// operator.go, signals.go, bulk.go, leases.go, workers.go,
	// retention.go, policies.go, limits.go (a named lock).
	operatorTx struct{ *txn }
)

// newTxn returns a transaction of s on x for engine, its operations wired
// to it.
func (s *Store) newTxn(ctx context.Context, x sqldb.Querier, engine string) *txn {
	t := &txn{Tx: sqltx.Tx{Ctx: ctx, X: x, H: &s.Handle, Now: s.Clock().UnixMicro(), Engine: engine}, s: s}
	t.outcomeTx.txn, t.submitTx.txn, t.operatorTx.txn = t, t, t
	return t
}

// write runs fn in one write transaction (IMMEDIATE on SQLite).
func (s *Store) write(ctx context.Context, engineID string, fn func(t *txn) error) error {
	ctx, err := s.WriteContext(ctx)
	if err != nil {
		return err
	}
	tx, err := s.DB.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", s.WriteErr(err))
	}
	t := s.newTxn(ctx, tx, engineID)
	t.Owned = true
	ran := false
	defer func() {
		if !ran {
			// fn panicked (a bug, which an HTTP server recovers from):
			// the transaction rolls back, so that its connection (on
			// SQLite, the one writer) serves the next write, and the
			// panic goes on.
			tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	err = t.run(fn)
	ran = true
	if err != nil {
		err = s.WriteErr(err)
		tx.Rollback(context.WithoutCancel(ctx))
		if t.NotifyTaken {
			// The window's notification was to ride on this transaction;
			// send it when the window ends instead, for those that waited.
			s.ScheduleNotify()
		}
		return err
	}
	if err = tx.Commit(ctx); err != nil {
		if t.NotifyTaken {
			s.ScheduleNotify()
		}
		return fmt.Errorf("commit: %w", s.WriteErr(err))
	}
	s.woke(t)
	if t.NotifyDeferred {
		s.ScheduleNotify()
	}
	return nil
}

// contendedTries is how many times writeRetry runs a transaction that the
// database gives up for its clash with concurrent ones.
const contendedTries = 5

// writeRetry is write for a transaction that can run again from the start
// (fn keeps nothing outside the transaction but what it sets afresh): one
// the database gives up for its clash with concurrent transactions (a
// deadlock, a serialization failure) runs again, up to contendedTries
// times in all, after a short pause with jitter; then it is
// store.ErrContended.
func (s *Store) writeRetry(ctx context.Context, engineID string, fn func(t *txn) error) error {
	for try := 1; ; try++ {
		err := s.write(ctx, engineID, fn)
		if err == nil || !errors.Is(err, store.ErrContended) || try == contendedTries {
			return err
		}
		// 1-2 ms, then 2-4, 4-8, 8-16: the other transaction is short.
		pause := time.Duration(1<<(try-1)) * time.Millisecond
		pause += rand.N(pause)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
}

// within runs fn inside a transaction the caller began and will commit or
// roll back. Engines in this process are woken at once (they find the steps
// when the caller commits); other processes hear the notification, which
// PostgreSQL delivers only on commit.
func (s *Store) within(ctx context.Context, q sqldb.Querier, fn func(t *txn) error) error {
	t := s.newTxn(ctx, q, "")
	if err := t.run(fn); err != nil {
		return err
	}
	s.woke(t)
	return nil
}

// woke wakes this handle's engines for what transaction t did: steps made
// ready (Wake), a due time written (DueWake), a task ended (TaskEnded).
func (s *Store) woke(t *txn) {
	if t.LeftReady() {
		s.Notify()
	}
	if t.Timed {
		s.NudgeDue()
	}
	if t.EndedTask {
		s.Ended.Fire()
	}
}

// run applies fn, writes the queued audit rows and, if steps became ready,
// the dialect's notification.
func (t *txn) run(fn func(t *txn) error) error {
	if err := fn(t); err != nil {
		return err
	}
	if err := t.flushBreakers(); err != nil {
		return err
	}
	if err := t.FlushAudit(); err != nil {
		return err
	}
	if (t.LeftReady() || t.Timed) && t.s.Notice.Statement != "" {
		switch {
		case t.Timed:
			// Told at once: a window's later notification says nothing of
			// due times (transactions that write them are few).
		case t.Owned:
			if !t.s.TakeNotify() {
				t.NotifyDeferred = true
				return nil
			}
			t.NotifyTaken = true
		}
		// Nothing reads it: it goes with the COMMIT where it can.
		if err := t.Soon("notify", t.s.Notice.Statement, t.s.Notice.Channel, t.s.NotifyPayload(t.Timed, t.Owned)); err != nil {
			return err
		}
	}
	return nil
}

// claimer returns the claim of transaction t, made in t's own memory: a
// claim allocates nothing for it.
func (t *txn) claimer() *claim.ClaimTx {
	t.claim.Tx, t.claim.Plan, t.claim.Breakers = &t.Tx, &t.s.plan, &t.breakers
	return &t.claim
}
