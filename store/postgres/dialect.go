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
