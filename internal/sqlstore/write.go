package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/store"
)

// newTxn returns a transaction of s on x for engine.
func (s *Store) newTxn(ctx context.Context, x sqldb.Querier, engine string) *transition.Tx {
	return transition.New(ctx, x, &s.Handle, &s.plan, engine)
}

// write runs fn in one write transaction (IMMEDIATE on SQLite).
func (s *Store) write(ctx context.Context, engineID string, fn func(t *transition.Tx) error) error {
	return s.workWrite(ctx, sqldb.Other, engineID, fn)
}

// workWrite is write for work w: claims and outcomes run on the
// connections the DB keeps for them, where it does (begin).
func (s *Store) workWrite(ctx context.Context, w sqldb.Work, engineID string, fn func(t *transition.Tx) error) error {
	ctx, err := s.WriteContext(ctx)
	if err != nil {
		return err
	}
	tx, err := s.begin(ctx, w)
	if err != nil {
		return fmt.Errorf("begin: %w", s.WriteErr(err))
	}
	t := s.newTxn(ctx, tx, engineID)
	t.Owned, t.Work = true, w
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
	err = t.Run(fn)
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

// begin begins a write transaction of work w: on the DB's connections
// for w where it keeps some (sqldb.WorkBeginner).
func (s *Store) begin(ctx context.Context, w sqldb.Work) (sqldb.Tx, error) {
	if b, ok := s.DB.(sqldb.WorkBeginner); ok {
		return b.BeginWork(ctx, w)
	}
	return s.DB.Begin(ctx)
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
func (s *Store) writeRetry(ctx context.Context, engineID string, fn func(t *transition.Tx) error) error {
	return s.workWriteRetry(ctx, sqldb.Other, engineID, fn)
}

// workWriteRetry is writeRetry for work w (workWrite).
func (s *Store) workWriteRetry(ctx context.Context, w sqldb.Work, engineID string, fn func(t *transition.Tx) error) error {
	for try := 1; ; try++ {
		err := s.workWrite(ctx, w, engineID, fn)
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
func (s *Store) within(ctx context.Context, q sqldb.Querier, fn func(t *transition.Tx) error) error {
	t := s.newTxn(ctx, q, "")
	if err := t.Run(fn); err != nil {
		return err
	}
	s.woke(t)
	return nil
}

// woke wakes this handle's engines for what transaction t did: steps made
// ready (Wake), a due time written (DueWake), a task ended (TaskEnded).
func (s *Store) woke(t *transition.Tx) {
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
