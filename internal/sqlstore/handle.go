package sqlstore

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
	db    sqldb.DB
	d     Dialect
	clock func() time.Time
	wake  chan struct{}
	due   chan struct{}
	// ended fires when a transaction of this handle ends a task
	// (TaskEnded).
	ended broadcast.Signal
	// origin marks the notifications this handle sends for its own
	// transactions, whose engines it woke itself (see notifyPayload).
	origin string

	binder *sqldb.Binder
	// notice is how this handle wakes engines in other processes.
	notice       Notification
	notifyMu     sync.Mutex
	lastNotify   time.Time
	notifyLater  *time.Timer // armed while a notification waits for its window
	notifyClosed bool

	// auditScratch keeps audit queues between writes (audit.go).
	auditScratch auditScratch
}

// newHandle returns the Handle of db in dialect d, whose time is clock's.
func newHandle(db sqldb.DB, d Dialect, clock func() time.Time) Handle {
	return Handle{db: db, d: d, clock: clock,
		wake: make(chan struct{}, 1), due: make(chan struct{}, 1), origin: strconv.FormatUint(rand.Uint64(), 36),
		binder: sqldb.NewBinder(d.Numbered()), notice: d.Notification()}
}

// read runs a query on the readers.
func (s *Handle) read(ctx context.Context, q string, args ...any) (sqldb.Rows, error) {
	return s.db.Query(ctx, s.bind(q), args...)
}

// execAlone runs one write statement in a transaction of its own: for a
// write that stands alone, one round trip instead of three. It honours the
// dialect like write does (WriteContext, writeErr).
func (s *Handle) execAlone(ctx context.Context, q string, args ...any) (sqldb.Result, error) {
	ctx, err := s.writeContext(ctx)
	if err != nil {
		return nil, err
	}
	res, err := s.db.Exec(ctx, s.bind(q), args...)
	return res, s.writeErr(err)
}

// readRow runs a one-row query on the readers.
func (s *Handle) readRow(ctx context.Context, q string, args ...any) sqldb.Row {
	return s.db.QueryRow(ctx, s.bind(q), args...)
}

// aRead is one of the reads of readTogether: its query and arguments, and
// what reads its rows.
type aRead struct {
	q    string
	args []any
	read func(sqldb.Rows) error
}

// readTogether runs reads that do not depend on each other, in one round
// trip where the database takes them so (sqldb.ReadBatcher), else one after the
// other; each read's function reads its rows.
func (s *Handle) readTogether(ctx context.Context, reads ...aRead) error {
	if b, ok := s.db.(sqldb.ReadBatcher); ok {
		sts := make([]sqldb.Statement, len(reads))
		for i, r := range reads {
			sts[i] = sqldb.Statement{Query: s.bind(r.q), Args: r.args}
		}
		return b.ReadBatch(ctx, sts, func(i int, rows sqldb.Rows) error { return reads[i].read(rows) })
	}
	for _, r := range reads {
		rows, err := s.read(ctx, r.q, r.args...)
		if err != nil {
			return err
		}
		if err := r.read(rows); err != nil {
			return err
		}
	}
	return nil
}

// bind returns q with the dialect's placeholders.
func (s *Handle) bind(q string) string { return s.binder.Bind(q) }

// writeContext is the context a write runs under (Dialect.WriteContext).
func (s *Handle) writeContext(ctx context.Context) (context.Context, error) {
	return s.d.WriteContext(ctx)
}

// writeErr marks an error of a write as the dialect classifies it
// (sqldb.WriteErr).
func (s *Handle) writeErr(err error) error { return sqldb.WriteErr(s.d, err) }

// Close closes the database.
func (s *Handle) Close() error {
	s.notifyMu.Lock()
	s.notifyClosed = true
	if s.notifyLater != nil {
		s.notifyLater.Stop()
	}
	s.notifyMu.Unlock()
	return s.db.Close()
}
