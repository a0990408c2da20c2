// Package sqlstore is the SQL implementation of store.Store shared by the
// embedded SQLite store and the PostgreSQL store. The backends differ in the
// Dialect each supplies (package sqltx: placeholders, row locking in the
// claim, arrays, notifications, how their errors read) and in the DB they
// hand over (package sqldb: database/sql or native pgx). Everything that
// decides state lives in this package and those below it once, so both
// backends behave the same.
//
// The packages, from the top: sqlstore opens transactions and reads
// (Store, whose operations are grouped in types by family: claims,
// lifecycle, maintenance, reads and admin); transition holds the state
// changes a write transaction makes (submissions, outcomes and their
// cascade, signals, operator actions); claim takes steps under the
// scheduling policies, keeping what claims share in the handle's
// claim.Planner; sqltx holds what every operation shares (the handle, the
// transaction's statements and audit, scanning rows into records, rowsets,
// the notifications that wake engines); sqldb the drivers' plumbing.
//
// The files here follow the operations: write.go (running write
// transactions), submit.go, complete.go, running.go (fenced writes and
// reads of running steps), children.go, signals.go, claims.go (the claim
// operations and the policies' writes), explain.go (query plans),
// ratereport.go and breakers.go (rate buckets and breakers for operators),
// leases.go (engines, heartbeats, leader, release, reap), timers.go
// (expiry, promotion, deadlines, the next wake), workers.go, retention.go,
// schedules.go (cron schedules and firing their ticks), operator.go and
// bulk.go (operator actions), tasks.go, filter.go, history.go (the audit
// log in commit order), stats.go, attention.go, credentials.go,
// workflows.go, webhooks.go and migrate.go.
package sqlstore

import (
	"time"

	"github.com/weftrun/weft/internal/sqlstore/claim"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
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
	Dialect sqltx.Dialect
}

// Store is a store.Store on a SQL database.
type Store struct {
	sqltx.Handle

	// plan is the claim planner's state between claims (planner.go).
	plan claim.Planner
	// lease is the maintenance lease as this handle last took it
	// (leases.go).
	lease leaseSeen

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
	// claims.go, explain.go, ratereport.go, breakers.go.
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
	s := &Store{Handle: sqltx.NewHandle(c.DB, c.Dialect, c.Clock, c.Aging.Microseconds()),
		plan: claim.Planner{Dialect: c.Dialect, RateSet: claim.RateTakeSet(c.Dialect.Fence())}}
	s.claims.Store, s.lifecycle.Store, s.maintenance.Store, s.reads.Store, s.admin.Store = s, s, s, s, s
	return s
}

var _ store.Store = (*Store)(nil)
