package postgres

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
)

// MaxConnsInURL exposes maxConnsInURL to the tests.
var MaxConnsInURL = maxConnsInURL

// Refused exposes refused to the tests.
var Refused = refused

// HistorySpan exposes historySpan to the tests.
var HistorySpan = historySpan

// Partitions returns the database's clock and the audit trail's time
// partitions, oldest first: their names and where each begins.
func Partitions(ctx context.Context, db *sql.DB) (time.Time, []string, []time.Time, error) {
	now, parts, err := partitions(ctx, db)
	var names []string
	var starts []time.Time
	for _, p := range parts {
		names, starts = append(names, p.name), append(starts, p.lo)
	}
	return now, names, starts, err
}

// NewPoolDB exposes the store's transactions on a pool to the tests,
// claims and outcomes on the same pool.
func NewPoolDB(p *pgxpool.Pool) sqldb.DB { return newPoolDB(p, p, p) }

// OpenTraced is Open with a tracer of every statement the store sends,
// alone or in batches.
func OpenTraced(ctx context.Context, url string, opts Options, tracer interface {
	pgx.QueryTracer
	pgx.BatchTracer
}) (Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return Store{}, err
	}
	cfg.ConnConfig.Tracer = tracer
	return open(ctx, cfg, url, opts)
}
