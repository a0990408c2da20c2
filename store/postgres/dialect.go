package postgres

import (
	"context"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqltx"
)

// dialect is PostgreSQL's sqltx.Dialect: several engines write at once,
// so the claim locks the rows it takes and the locks of the policies it
// counts under; statements write in their WITH and take arrays.
type dialect struct {
	// channel is the schema's channel of wake-up notifications, so that
	// installations sharing a database do not wake each other.
	channel string
}

var _ sqltx.Dialect = dialect{}

// notifyEvery is the shortest time between two wake-up notifications of a
// store: transactions within it share one, sent when it ends.
const notifyEvery = 5 * time.Millisecond

// planOnce makes a transaction's statements run on plans made once per
// connection that read every table by index (see ClaimPlan).
const planOnce = "set_config('enable_seqscan', 'off', true) || set_config('plan_cache_mode', 'force_generic_plan', true)"

func (dialect) Refused(err error) bool   { return refused(err) }
func (dialect) Contended(err error) bool { return contended(err) }

// Unavailable: the pool's DB marks an unreachable server's errors itself
// (unavailable.go).
func (dialect) Unavailable(error) bool { return false }

func (dialect) WriteContext(ctx context.Context) (context.Context, error) { return ctx, nil }

func (dialect) Numbered() bool         { return true }
func (dialect) Arrays() bool           { return true }
func (dialect) WithWrites() bool       { return true }
func (dialect) TxHistory() bool        { return true }
func (dialect) ExpiredAudit() []string { return []string{"audit_kept", "audit_default"} }
func (dialect) ClaimLock() string      { return "FOR UPDATE SKIP LOCKED" }
func (dialect) ClaimLimit() string     { return "LIMIT ?" }
func (dialect) Fence() string          { return " OFFSET 0" }

// ClaimPlan reads the ready index in order whatever the statistics say (a
// fresh queue's lag behind it). It never JIT-compiles the claim's small
// statements: a plan whose cost the disabled sort inflates would cost half
// a second. It plans each statement once per connection: the custom plan
// of a statement of arrays (which knows their sizes) always looks cheaper
// than the generic one, so PostgreSQL would plan the claim statement at
// every call, 0.25 ms against 0.1 ms of running it. Without sequential
// scans, a plan made while the tables were small reads them by index once
// they have grown.
func (dialect) ClaimPlan() string {
	return "set_config('enable_sort', 'off', true) || set_config('enable_bitmapscan', 'off', true) || set_config('jit', 'off', true) || " + planOnce
}

// CompletePlan: a batch of outcomes plans once too; its lock of the tasks
// was planned at every call.
func (dialect) CompletePlan() string { return planOnce }

// Lock takes one named lock (the fair shares'); LimitRoom locks namespaces'
// limits and counts or bounds what runs in them: the function of
// migrations 021 and 024. Both name their locks in the schema's name:
// advisory locks are the whole database's.
func (dialect) Lock() string {
	return "(SELECT 1 FROM pg_advisory_xact_lock(hashtext(current_schema() || '/' || ?)))"
}

func (dialect) LimitRoom() string { return "weft_limit_room(%s::text[], %s, %s::bigint[])" }

func (dialect) FairReadiness() string {
	return "ARRAY(SELECT r_kind || ' ' || r_n || ' ' || r_namespace FROM weft_fair_readiness(?, ?))"
}

func (dialect) Explain() (string, int) { return "EXPLAIN", 1 }
func (dialect) ExplainAnalyze() string { return "EXPLAIN (ANALYZE, BUFFERS)" }

func (d dialect) Notification() sqltx.Notification {
	return sqltx.Notification{Statement: "SELECT pg_notify(?, ?)", Channel: d.channel, Every: notifyEvery}
}
