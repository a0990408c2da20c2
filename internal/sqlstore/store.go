// Package sqlstore is the SQL implementation of store.Store shared by the
// embedded SQLite store and the PostgreSQL store. The backends differ in the
// Dialect each supplies (dialect.go: placeholders, row locking in the claim,
// arrays, notifications, how their errors read) and in the DB they hand over
// (package sqldb: database/sql or native pgx). Everything that decides state
// lives here once, so both backends behave the same.
//
// Store's operations are grouped in types by family (store.go): claims,
// lifecycle, maintenance, reads and admin; a write transaction's (txn.go) in
// outcomeTx, submitTx and operatorTx, and a claim's in claimTx (claimtx.go),
// with what claims keep between them in the planner (planner.go). The
// policies the claim's query of candidates skips steps for are each a
// candidatePolicy (claimpolicy.go).
//
// The files follow the operations: submit.go (inserting tasks; submitbulk.go
// is the bulk path, submitrows.go the rows both build), claim.go (picking
// the steps to claim) and claimed.go (marking them running), explain.go
// (query plans), complete.go (recording outcomes), cascade.go (what a
// step's end does to its task and children), running.go (fenced writes and
// reads of running steps), leases.go (engines, heartbeats, leader, release,
// reap), timers.go (expiry, promotion, deadlines, the next wake),
// signals.go, dynamic.go (decisions and batches), operator.go (operator
// actions), tasks.go (reads), history.go (the audit log in commit order),
// credentials.go, workflows.go, schedules.go (cron schedules and firing
// their ticks), children.go (sub-workflows: child tasks and their links)
// and supersede.go (a submission that takes an idempotency key from its
// holder); the scheduling policies are policies.go, limits.go (with
// limitbounds.go, the bounds of limits far from binding), rates.go (with
// reserves.go, tokens reserved ahead, and ratereport.go, the buckets read
// for operators), fair.go, breakers.go (breakerclaim.go in the claim,
// breakeroutcomes.go in outcomes) and preemption.go. txn.go is the
// transaction helper every write goes through, scan.go reads rows into
// records, notify.go wakes engines and rowset.go passes many rows to one
// statement.
package sqlstore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/broadcast"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/store"
)

// Config configures a Store.
type Config struct {
	// DB runs reads and write transactions.
	DB sqldb.DB
	// Aging is how long a ready step waits to gain one priority level.
	Aging time.Duration
	// Clock returns the current time.
	Clock   func() time.Time
	Dialect Dialect
}

// Store is a store.Store on a SQL database.
type Store struct {
	db    sqldb.DB
	d     Dialect
	aging int64 // microseconds per priority level
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

	// plan is the claim planner's state between claims (planner.go).
	plan planner
	// lease is the maintenance lease as this handle last took it
	// (leases.go).
	lease leaseSeen
	// auditScratch keeps audit queues between writes (audit.go).
	auditScratch auditScratch

	claims
	lifecycle
	maintenance
	reads
	admin
}

// The store's operations, by family: each a type of its own, whose methods
// the Store takes on (they are embedded, wired by New).
type (
	// claims claims steps and keeps the policies they are claimed under:
	// claim.go, explain.go, fair.go, preemption.go, policies.go,
	// ratereport.go, breakers.go.
	claims struct{ *Store }
	// lifecycle submits tasks and records what their running steps do:
	// submit.go, complete.go, running.go, children.go, signals.go.
	lifecycle struct{ *Store }
	// maintenance keeps engines, leases, timers, schedules and retention:
	// leases.go, timers.go, workers.go, retention.go, schedules.go.
	maintenance struct{ *Store }
	// reads reads tasks, steps, their history and counts: tasks.go,
	// history.go, stats.go, attention.go, filter.go.
	reads struct{ *Store }
	// admin is the operators' actions and records: operator.go, bulk.go,
	// workflows.go, webhooks.go, credentials.go.
	admin struct{ *Store }
)

// New returns a Store on open database handles whose schema is current.
func New(c Config) *Store {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Aging <= 0 {
		c.Aging = time.Minute
	}
	s := &Store{db: c.DB, d: c.Dialect, aging: c.Aging.Microseconds(), clock: c.Clock,
		wake: make(chan struct{}, 1), due: make(chan struct{}, 1), origin: strconv.FormatUint(rand.Uint64(), 36),
		binder: sqldb.NewBinder(c.Dialect.Numbered()), notice: c.Dialect.Notification(),
		plan: planner{d: c.Dialect, rateSet: rateTakeSet(c.Dialect.Fence())}}
	s.claims.Store, s.lifecycle.Store, s.maintenance.Store, s.reads.Store, s.admin.Store = s, s, s, s, s
	return s
}

// read runs a query on the readers.
func (s *Store) read(ctx context.Context, q string, args ...any) (sqldb.Rows, error) {
	return s.db.Query(ctx, s.bind(q), args...)
}

// execAlone runs one write statement in a transaction of its own: for a
// write that stands alone, one round trip instead of three. It honours the
// dialect like write does (WriteContext, writeErr).
func (s *Store) execAlone(ctx context.Context, q string, args ...any) (sqldb.Result, error) {
	ctx, err := s.writeContext(ctx)
	if err != nil {
		return nil, err
	}
	res, err := s.db.Exec(ctx, s.bind(q), args...)
	return res, s.writeErr(err)
}

// readRow runs a one-row query on the readers.
func (s *Store) readRow(ctx context.Context, q string, args ...any) sqldb.Row {
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
func (s *Store) readTogether(ctx context.Context, reads ...aRead) error {
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
func (s *Store) bind(q string) string { return s.binder.Bind(q) }

var _ store.Store = (*Store)(nil)

// Close closes the database.
func (s *Store) Close() error {
	s.notifyMu.Lock()
	s.notifyClosed = true
	if s.notifyLater != nil {
		s.notifyLater.Stop()
	}
	s.notifyMu.Unlock()
	return s.db.Close()
}
