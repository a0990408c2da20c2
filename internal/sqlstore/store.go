// Package sqlstore is the SQL implementation of store.Store shared by the
// embedded SQLite store and the PostgreSQL store. The backends differ in a
// Dialect (placeholders, row locking in the claim, how namespace caps are
// serialised, arrays, notifications) and in the DB they hand over (database/sql
// or native pgx). Everything that decides state lives here once, so both
// backends behave the same.
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
// for operators), fair.go, breakers.go and preemption.go. txn.go is the transaction helper
// every write goes through, scan.go reads rows into records, notify.go
// wakes engines and rowset.go passes many rows to one statement.
package sqlstore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftrun/weft/internal/broadcast"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/store"
)

// Dialect is what differs between SQL backends.
type Dialect struct {
	// Numbered rewrites the "?" placeholders the queries are written with
	// as $1, $2, … .
	Numbered bool
	// ClaimLock is appended to the query that selects the steps to claim,
	// so that concurrent engines skip each other's rows ("FOR UPDATE SKIP
	// LOCKED"); empty where one writer at a time is guaranteed.
	ClaimLock string
	// Arrays: the database takes arrays as parameters (unnest), so bulk
	// writes are one statement whatever their size.
	Arrays bool
	// Lateral: the database has LATERAL joins (PostgreSQL). A lateral
	// subquery with OFFSET 0 is not pulled up, so it runs once per outer
	// row, by index, whatever the statistics say (a fresh queue's lag
	// behind it); the claim's joins are written so.
	Lateral bool
	// Fence ends a subquery that the planner must run as written rather
	// than pull up into the query around it, where pulling it up would
	// copy its expressions into every use of its columns (PostgreSQL:
	// " OFFSET 0").
	Fence string
	// WithWrites: a statement's WITH clause may update rows (PostgreSQL),
	// so the claim marks its steps running, starts their tasks and loads
	// what the handlers see in one statement.
	WithWrites bool
	// ClaimPlan, if set, is an expression that the first statement of each
	// claim transaction evaluates for its effect: it steers the planner
	// for the claim's next statements (PostgreSQL's statistics lag behind
	// a freshly filled queue, and with them the claim turns into a scan
	// and sort of every ready step).
	ClaimPlan string
	// CompletePlan, if set, is an expression that the first statement of
	// each batch of outcomes evaluates, in the batch's transaction: its
	// planner settings (PostgreSQL's set_config(..., true)).
	CompletePlan string
	// LimitRoom, if set, is a set-returning call, with %s for its three
	// arguments (namespaces, sorted; whether to wait for their locks, else
	// only try them; counts to bound from, which this store passes as
	// NULL: it bounds without the call, limitbounds.go), that takes the
	// transaction-scoped lock of each namespace's concurrency limits and
	// then counts what runs in each, with the totals read before the
	// count (see countRow for its rows), so that engines count and claim
	// under a namespace's limits one at a time. Where it is empty, one
	// writer at a time is guaranteed and the claim counts without locks.
	LimitRoom string
	// Lock, if set, is an expression that takes a transaction-scoped lock
	// on the name it is given (one argument) and yields a value; empty
	// where one writer at a time is guaranteed.
	Lock string
	// FairReadiness, if set, is an expression for the claim's first
	// statement, with two arguments (the fair shares' lock, the most
	// namespaces to find), that takes the lock and then yields the rows of
	// fairReadiness as an array of "KIND N NAMESPACE"; where it is empty,
	// the claim takes the lock with Lock and reads fairReadiness in a
	// statement of its own.
	FairReadiness string
	// ClaimLimit is how the claim's query of candidates bounds its rows by
	// a parameter: "LIMIT ?" where it is empty. SQLite plans a LIMIT that
	// is a bare parameter from the value bound to it, so binding one marks
	// the prepared statement to be prepared again, at every claim (15 µs
	// of the 22 the query took on a small queue); "LIMIT (SELECT ?)" keeps
	// the value out of the plan.
	ClaimLimit string
	// Uncancellable runs a write transaction's statements under a context
	// that cannot be cancelled (checked once before it begins), for drivers
	// that pay for each cancellable statement (mattn/go-sqlite3 starts a
	// goroutine per statement). Waits stay bounded by the busy timeout.
	Uncancellable bool
	// Explain prefixes a query to get its plan ("EXPLAIN QUERY PLAN"),
	// whose rows have ExplainColumns columns, the last one the plan line.
	Explain        string
	ExplainColumns int
	// ExplainAnalyze, if set, prefixes a query to run it and get its plan
	// with what it did (EXPLAIN (ANALYZE, BUFFERS)); its rows are plan
	// lines like Explain's.
	ExplainAnalyze string
	// Notify, if set, is a statement that wakes engines in other processes
	// (pg_notify); its arguments are NotifyChannel and a payload (see
	// notifyPayload). A transaction that made steps ready runs it, at
	// most once per NotifyEvery: a transaction
	// inside that window leaves it to a notification sent once the window
	// ends, so a busy database is not flooded with them.
	Notify        string
	NotifyChannel string
	NotifyEvery   time.Duration
	// Refused reports whether an error of the driver is the database
	// refusing a statement for what it carries or does (a value it cannot
	// store, a constraint, a limit), which trying again cannot cure, as
	// opposed to a passing failure (a lost connection, a deadlock, a
	// timeout). Write transactions mark such errors store.ErrRefused; nil
	// treats every error as passing.
	Refused func(error) bool
	// Unavailable reports whether an error of the driver says the
	// database cannot write for now, for a reason outside it that passes
	// when the reason does (SQLite: a full disk, the disk failing a
	// write): write errors are marked store.ErrUnavailable, as an
	// unreachable server's are on PostgreSQL, so that the API answers 503
	// and callers retry. nil marks none.
	Unavailable func(error) bool
	// Contended reports whether an error of the driver is the database
	// giving up a transaction for its clash with concurrent ones (a
	// serialization failure, a deadlock), which the same transaction run
	// again may pass: such writes are tried again a few times
	// (writeRetry) and then marked store.ErrContended. nil: never.
	Contended func(error) bool
	// TxHistory: audit rows carry the id of the transaction that wrote
	// them (txid), and the history is read in (txid, id) order up to the
	// oldest running transaction, since ids are committed out of order.
	// Without it ids are handed out in commit order (one writer at a
	// time) and the history is read in id order.
	TxHistory bool
}

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
	// claimTexts are the texts of claim statements (claimText -> string).
	claimTexts sync.Map

	notifyMu     sync.Mutex
	lastNotify   time.Time
	notifyLater  *time.Timer // armed while a notification waits for its window
	notifyClosed bool

	// policyMu guards policyCache: the policies as of a policy version,
	// read again by a claim that sees another version (policies.go).
	policyMu    sync.Mutex
	policyCache *policySet
	// fair holds the passes of the fair shares (fair.go).
	fair fairPasses
	// lease is the maintenance lease as this handle last took it
	// (leases.go).
	lease leaseSeen
	// limitNamespaces are the namespaces this handle's last claim met
	// concurrency limits in, sorted: the next claim takes their locks
	// with its first statement (limits.go).
	limitNamespaces atomic.Pointer[[]string]
	// ratesGranted is set while this handle's last claim under rates got
	// every token it asked for: the next takes them in its claim statement
	// (rates.go).
	ratesGranted atomic.Bool
	// rateSet is the update of an existing bucket by a take of rate tokens
	// (rateTakeSet), in the dialect.
	rateSet string
	// reserves are the rate tokens this handle holds ahead (reserves.go).
	reserves reserves
	// bounds are the counts of namespaces with limits this handle bounds
	// from (limitbounds.go).
	bounds limitBounds
	// aheadShut: the last claim this handle sent with its query of
	// candidates (candidatesAhead) found its gate shut, so the next one
	// keeps its transaction open for the claim's rounds instead of
	// sending its COMMIT with it.
	aheadShut atomic.Bool
	// backlog: the last claim of ClaimSteps took every step it asked for,
	// so the next one, on a store whose statements cannot write in their
	// WITH (SQLite), tries first to claim in one statement (claimGated).
	backlog atomic.Bool
	// auditScratch keeps audit queues between writes (audit.go).
	auditScratch auditScratch
}

// New returns a Store on open database handles whose schema is current.
func New(c Config) *Store {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Aging <= 0 {
		c.Aging = time.Minute
	}
	return &Store{db: c.DB, d: c.Dialect, aging: c.Aging.Microseconds(), clock: c.Clock,
		wake: make(chan struct{}, 1), due: make(chan struct{}, 1), origin: strconv.FormatUint(rand.Uint64(), 36),
		binder:  sqldb.NewBinder(c.Dialect.Numbered),
		rateSet: rateTakeSet(c.Dialect.Fence)}
}

// read runs a query on the readers.
func (s *Store) read(ctx context.Context, q string, args ...any) (sqldb.Rows, error) {
	return s.db.Query(ctx, s.bind(q), args...)
}

// execAlone runs one write statement in a transaction of its own: for a
// write that stands alone, one round trip instead of three. It honours the
// dialect like write does (Uncancellable, writeErr).
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
