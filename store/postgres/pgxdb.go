package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weftrun/weft/internal/sqlstore"
)

// pgxRunner is what a pool, a connection and a transaction of pgx share.
type pgxRunner interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error)
}

// querier adapts pgx to sqlstore.Querier. Statements go through pgx's own
// per-connection statement cache.
type querier struct{ r pgxRunner }

func (q querier) Exec(ctx context.Context, sql string, args ...any) (sqlstore.Result, error) {
	tag, err := q.r.Exec(ctx, sql, args...)
	return commandTag(tag), unavailable(err)
}

func (q querier) Query(ctx context.Context, sql string, args ...any) (sqlstore.Rows, error) {
	rows, err := q.r.Query(ctx, sql, args...)
	if err != nil {
		return nil, unavailable(err)
	}
	return pgxRows{rows}, nil
}

func (q querier) QueryRow(ctx context.Context, sql string, args ...any) sqlstore.Row {
	return row{q.r.QueryRow(ctx, sql, args...)}
}

func (q querier) CopyFrom(ctx context.Context, table string, columns []string, rows sqlstore.CopySource) (int64, error) {
	n, err := q.r.CopyFrom(ctx, pgx.Identifier{table}, columns, rows)
	return n, unavailable(err)
}

var _ sqlstore.Copier = querier{}

type row struct{ pgx.Row }

func (r row) Scan(dest ...any) error { return unavailable(r.Row.Scan(dest...)) }

type commandTag pgconn.CommandTag

func (t commandTag) RowsAffected() (int64, error) { return pgconn.CommandTag(t).RowsAffected(), nil }

type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error {
	r.Rows.Close()
	return unavailable(r.Rows.Err())
}

func (r pgxRows) Err() error { return unavailable(r.Rows.Err()) }

func (r pgxRows) Scan(dest ...any) error { return unavailable(r.Rows.Scan(dest...)) }

// poolDB is a sqlstore.DB on a pgx pool.
type poolDB struct {
	querier
	pool *pgxpool.Pool
}

func newPoolDB(pool *pgxpool.Pool) poolDB { return poolDB{querier{pool}, pool} }

func (d poolDB) Begin(ctx context.Context) (sqlstore.Tx, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	return poolTx{querier{tx}, tx}, nil
}

func (d poolDB) Close() error {
	d.pool.Close()
	return nil
}

type poolTx struct {
	querier
	tx pgx.Tx
}

func (t poolTx) Commit(ctx context.Context) error   { return unavailable(t.tx.Commit(ctx)) }
func (t poolTx) Rollback(ctx context.Context) error { return unavailable(t.tx.Rollback(ctx)) }
