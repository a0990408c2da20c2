// Package sqltx is what every SQL operation of the store writes and reads
// through: the Dialect each backend supplies (dialect.go), the Handle a
// store's operations share (the database, the clock, the notifications that
// wake engines: notify.go), the write transaction Tx with its statements and
// guarded state changes (tx.go) and its audit queue (audit.go), rowsets that
// pass many rows as one parameter (rowset.go) and the scanning of rows into
// records (scan.go). It knows no operation: package sqlstore and the
// packages under it build on it.
package sqltx

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/broadcast"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
)

// Handle is what a store's operations share: the database and its
// dialect, the clock, how engines are woken (notify.go) and the audit
// queues kept between writes (audit.go).
type Handle struct {
	DB      sqldb.DB
	Dialect Dialect
	Clock   func() time.Time
	// Aging is how many microseconds a ready step waits to gain one
	// priority level.
	Aging int64
	wake  chan struct{}
	due   chan struct{}
	// Ended fires when a transaction of this handle ends a task
	// (TaskEnded).
	Ended broadcast.Signal
	// origin marks the notifications this handle sends for its own
	// transactions, whose engines it woke itself (see NotifyPayload).
	origin string

	binder *sqldb.Binder
	// Notice is how this handle wakes engines in other processes.
	Notice       Notification
	notifyMu     sync.Mutex
	lastNotify   time.Time
	notifyLater  *time.Timer // armed while a notification waits for its window
	notifyClosed bool

	// closeOnce makes Close safe to call again: the first call's error is
	// every call's.
	closeOnce sync.Once
	closeErr  error

	// auditScratch keeps audit queues between writes (audit.go).
	auditScratch auditScratch
}

// NewHandle returns the Handle of db in dialect d, whose time is clock's.
func NewHandle(db sqldb.DB, d Dialect, clock func() time.Time, aging int64) Handle {
	return Handle{DB: db, Dialect: d, Clock: clock, Aging: aging,
		wake: make(chan struct{}, 1), due: make(chan struct{}, 1), origin: strconv.FormatUint(rand.Uint64(), 36),
		binder: sqldb.NewBinder(d.Numbered()), Notice: d.Notification()}
}

// Read runs a query on the readers.
func (s *Handle) Read(ctx context.Context, q string, args ...any) (sqldb.Rows, error) {
	return s.DB.Query(ctx, s.Bind(q), args...)
}

// ExecAlone runs one write statement in a transaction of its own: for a
// write that stands alone, one round trip instead of three. It honours the
// dialect like write does (WriteContext, WriteErr).
func (s *Handle) ExecAlone(ctx context.Context, q string, args ...any) (sqldb.Result, error) {
	ctx, err := s.WriteContext(ctx)
	if err != nil {
		return nil, err
	}
	res, err := s.DB.Exec(ctx, s.Bind(q), args...)
	return res, s.WriteErr(err)
}

// ReadRow runs a one-row query on the readers.
func (s *Handle) ReadRow(ctx context.Context, q string, args ...any) sqldb.Row {
	return s.DB.QueryRow(ctx, s.Bind(q), args...)
}

// ARead is one of the reads of ReadTogether: its query and arguments, and
// what reads its rows.
type ARead struct {
	Query string
	Args  []any
	Read  func(sqldb.Rows) error
}

// Reader runs a read: on the handle's database (Handle.Read), or in a
// snapshot of it (InSnapshot).
type Reader func(ctx context.Context, q string, args ...any) (sqldb.Rows, error)

// InSnapshot runs fn, whose reads see one snapshot of the database where
// it takes them so (sqldb.Snapshotter: both stores), else the database as
// each read finds it.
func (s *Handle) InSnapshot(ctx context.Context, fn func(read Reader) error) error {
	sn, ok := s.DB.(sqldb.Snapshotter)
	if !ok {
		return fn(s.Read)
	}
	return sn.Snapshot(ctx, func(q sqldb.Querier) error {
		return fn(func(ctx context.Context, query string, args ...any) (sqldb.Rows, error) {
			return q.Query(ctx, s.Bind(query), args...)
		})
	})
}

// ReadTogether runs reads that do not depend on each other in one snapshot
// where the database takes them so (sqldb.ReadBatcher: both stores), else
// one after the other; each read's function reads its rows.
func (s *Handle) ReadTogether(ctx context.Context, reads ...ARead) error {
	if b, ok := s.DB.(sqldb.ReadBatcher); ok {
		sts := make([]sqldb.Statement, len(reads))
		for i, r := range reads {
			sts[i] = sqldb.Statement{Query: s.Bind(r.Query), Args: r.Args}
		}
		return b.ReadBatch(ctx, sts, func(i int, rows sqldb.Rows) error { return reads[i].Read(rows) })
	}
	for _, r := range reads {
		rows, err := s.Read(ctx, r.Query, r.Args...)
		if err != nil {
			return err
		}
		if err := r.Read(rows); err != nil {
			return err
		}
	}
	return nil
}

// Bind returns q with the dialect's placeholders.
func (s *Handle) Bind(q string) string { return s.binder.Bind(q) }

// WriteContext is the context a write runs under (Dialect.WriteContext).
func (s *Handle) WriteContext(ctx context.Context) (context.Context, error) {
	return s.Dialect.WriteContext(ctx)
}

// WriteErr marks an error of a write as the dialect classifies it
// (sqldb.WriteErr).
func (s *Handle) WriteErr(err error) error { return sqldb.WriteErr(s.Dialect, err) }

// Close closes the database. Calls after the first return its error and
// do nothing else.
func (s *Handle) Close() error {
	s.closeOnce.Do(func() {
		s.notifyMu.Lock()
		s.notifyClosed = true
		if s.notifyLater != nil {
			s.notifyLater.Stop()
		}
		s.notifyMu.Unlock()
		s.closeErr = s.DB.Close()
	})
	return s.closeErr
}
