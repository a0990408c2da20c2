package sqltx

import (
	"context"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
)

// Dialect is what differs between SQL backends: store/sqlite and
// store/postgres each supply one. Its SQL texts are fixed for a backend, so
// a statement built from them is the same text at every call. Where a
// method's text is empty, one writer at a time is guaranteed (SQLite) and
// the store does without it.
type Dialect interface {
	// Refused, Unavailable and Contended classify the driver's errors for
	// a write (sqldb.WriteErr); writes that the database gives up for
	// their clash with concurrent ones are tried again a few times
	// (writeRetry) before they are store.ErrContended.
	sqldb.Classifier

	// WriteContext is the context a write transaction's statements run
	// under, once the write has begun. SQLite's: one that the caller's
	// cancellation does not reach (checked once before it begins), as
	// mattn/go-sqlite3 starts a goroutine per cancellable statement;
	// waits stay bounded by the busy timeout.
	WriteContext(ctx context.Context) (context.Context, error)

	// Numbered: the "?" placeholders the queries are written with are
	// rewritten $1, $2, … .
	Numbered() bool
	// Arrays: the database takes arrays as parameters (unnest), so bulk
	// writes are one statement whatever their size.
	Arrays() bool
	// WithWrites: a statement's WITH clause may update rows (PostgreSQL),
	// so the claim marks its steps running, starts their tasks and loads
	// what the handlers see in one statement.
	WithWrites() bool
	// TxHistory: audit rows carry the id of the transaction that wrote
	// them (txid), and the history is read in (txid, id) order up to the
	// oldest running transaction, since ids are committed out of order.
	// Without it ids are handed out in commit order (one writer at a
	// time) and the history is read in id order.
	TxHistory() bool
	// ExpiredAudit lists the tables from which retention deletes its
	// tasks' audit rows: SQLite's audit; PostgreSQL's partitions that keep
	// rows by task (audit_kept, audit_default), its time partitions being
	// dropped whole (store.HistoryRoller).
	ExpiredAudit() []string

	// ClaimLock is appended to the query that selects the steps to claim,
	// so that concurrent engines skip each other's rows ("FOR UPDATE SKIP
	// LOCKED").
	ClaimLock() string
	// ClaimLimit is how the claim's query of candidates bounds its rows by
	// a parameter ("LIMIT ?"). SQLite plans a LIMIT that is a bare
	// parameter from the value bound to it, so binding one marks the
	// prepared statement to be prepared again, at every claim (15 µs of
	// the 22 the query took on a small queue); "LIMIT (SELECT ?)" keeps
	// the value out of the plan.
	ClaimLimit() string
	// Fence ends a subquery that the planner must run as written rather
	// than pull up into the query around it, where pulling it up would
	// copy its expressions into every use of its columns (PostgreSQL:
	// " OFFSET 0").
	Fence() string
	// Lock, if not empty, is an expression that takes a
	// transaction-scoped lock on the name it is given (one argument) and
	// yields a value.
	Lock() string
	// LimitRoom, if not empty, is a set-returning call, with %s for its
	// three arguments (namespaces, sorted; whether to wait for their
	// locks, else only try them; counts to bound from, which this store
	// passes as NULL: it bounds without the call, limitbounds.go), that
	// takes the transaction-scoped lock of each namespace's concurrency
	// limits and then counts what runs in each, with the totals read
	// before the count (see countRow for its rows), so that engines count
	// and claim under a namespace's limits one at a time. Where it is
	// empty, the claim counts without locks.
	LimitRoom() string
	// FairReadiness, if not empty, is an expression for the claim's first
	// statement, with two arguments (the fair shares' lock, the most
	// namespaces to find), that takes the lock and then yields the rows of
	// fairReadiness as an array of "KIND N NAMESPACE"; where it is empty,
	// the claim takes the lock with Lock and reads fairReadiness in a
	// statement of its own.
	FairReadiness() string

	// Explain prefixes a query to get its plan ("EXPLAIN QUERY PLAN"),
	// whose rows have columns columns, the last one the plan line.
	Explain() (prefix string, columns int)
	// ExplainAnalyze, if not empty, prefixes a query to run it and get its
	// plan with what it did (EXPLAIN (ANALYZE, BUFFERS)); its rows are
	// plan lines like Explain's.
	ExplainAnalyze() string

	// Notification is how engines in other processes are woken.
	Notification() Notification
}

// Notification is how a store wakes engines in other processes: Statement
// (pg_notify), if not empty, with the arguments Channel and a payload (see
// NotifyPayload). A transaction that made steps ready runs it, at most once
// per Every: a transaction inside that window leaves it to a notification
// sent once the window ends, so a busy database is not flooded with them.
type Notification struct {
	Statement string
	Channel   string
	Every     time.Duration
}
