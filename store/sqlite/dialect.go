package sqlite

import (
	"context"

	"github.com/weftrun/weft/internal/sqlstore/sqltx"
)

// dialect is SQLite's sqltx.Dialect: one writer at a time, so the claim
// takes no locks; none of PostgreSQL's arrays, numbered placeholders or
// writes in a WITH.
type dialect struct {
	// readOnly: the store opened a file it only reads, which has no
	// writes to mark unavailable.
	readOnly bool
}

var _ sqltx.Dialect = dialect{}

func (dialect) Refused(err error) bool { return refused(err) }

func (d dialect) Unavailable(err error) bool { return !d.readOnly && unavailable(err) }

func (dialect) Contended(error) bool { return false }

// WriteContext runs a write's statements under a context that cannot be
// cancelled, checked once before the write begins: mattn/go-sqlite3 starts
// a goroutine per cancellable statement. Waits stay bounded by the busy
// timeout.
func (dialect) WriteContext(ctx context.Context) (context.Context, error) {
	if err := ctx.Err(); err != nil {
		return ctx, err
	}
	return context.WithoutCancel(ctx), nil
}

func (dialect) Numbered() bool         { return false }
func (dialect) Arrays() bool           { return false }
func (dialect) WithWrites() bool       { return false }
func (dialect) TxHistory() bool        { return false }
func (dialect) ExpiredAudit() []string { return []string{"audit"} }
func (dialect) ClaimLock() string      { return "" }

// ClaimLimit: a bare parameter would have SQLite prepare the claim's query
// again at every claim.
func (dialect) ClaimLimit() string { return "LIMIT (SELECT ?)" }

func (dialect) Fence() string                    { return "" }
func (dialect) Lock() string                     { return "" }
func (dialect) LimitRoom() string                { return "" }
func (dialect) FairReadiness() string            { return "" }
func (dialect) Explain() (string, int)           { return "EXPLAIN QUERY PLAN", 4 }
func (dialect) ExplainAnalyze() string           { return "" }
func (dialect) Notification() sqltx.Notification { return sqltx.Notification{} }
