package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
)

// Refused exposes refused to the tests.
var Refused = refused

// HistorySpan exposes historySpan to the tests.
var HistorySpan = historySpan

// NewPoolDB exposes the store's transactions on a pool to the tests.
func NewPoolDB(p *pgxpool.Pool) sqldb.DB { return newPoolDB(p) }

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
