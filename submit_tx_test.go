package weft_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/workflow"
)

// txEngine starts an engine whose "tx/order" workflow counts its runs.
// txEngine starts an engine on a store of open, which it returns too.
func txEngine(t *testing.T, open storeFactory) (*weft.Engine, store.Store, *atomic.Int32) {
	t.Helper()
	s := open(t)
	e := newEngine(t, s, weft.Config{})
	var runs atomic.Int32
	e.Handle("count", func(ctx context.Context, a *weft.Attempt) (any, error) {
		runs.Add(1)
		return "done", nil
	})
	register(t, e, workflow.New("tx", "order", "1").Step("count", "count"))
	start(t, e)
	return e, s, &runs
}

func TestSubmitTxSQL(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		name := map[bool]string{true: "commit", false: "rollback"}[commit]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, open storeFactory) {
				ctx := context.Background()
				e, s, runs := txEngine(t, open)
				db := s.(interface{ DB() *sql.DB }).DB()
				_, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)`)
				require.NoError(t, err)

				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err)
				_, err = tx.ExecContext(ctx, `INSERT INTO orders (id, item) VALUES (1, 'book')`)
				require.NoError(t, err)
				res, err := e.SubmitTx(ctx, tx, weft.Submission{Workflow: "tx/order", Input: map[string]int{"order": 1}})
				require.NoError(t, err)
				require.Len(t, res, 1)
				id := res[0].Task.ID

				if !commit {
					require.NoError(t, tx.Rollback())
					_, err := e.Get(ctx, id)
					require.ErrorIs(t, err, weft.ErrNotFound, "a rolled-back submission must not exist")
					// A task submitted afterwards runs; the rolled-back one never did.
					after := submit(t, e, weft.Submission{Workflow: "tx/order"})
					require.Equal(t, "completed", string(wait(t, e, after.Task.ID).State))
					require.EqualValues(t, 1, runs.Load())
					return
				}
				require.NoError(t, tx.Commit())
				task := wait(t, e, id)
				require.Equal(t, "completed", string(task.State))
				require.EqualValues(t, 1, runs.Load())
				var item string
				require.NoError(t, db.QueryRowContext(ctx, `SELECT item FROM orders WHERE id = 1`).Scan(&item))
				require.Equal(t, "book", item)
			})
		})
	}
}

func TestSubmitTxPostgres(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		name := map[bool]string{true: "commit", false: "rollback"}[commit]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e, s, runs := txEngine(t, func(t testing.TB) store.Store { return pgtesting.Open(t, postgres.Options{MaxConns: 4}) })
			var schema string
			db := s.(postgres.Store).DB()
			require.NoError(t, db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema))

			// The caller's own connection, as an application holds it.
			cfg, err := pgx.ParseConfig(pgtesting.URL(t))
			require.NoError(t, err)
			cfg.RuntimeParams["search_path"] = schema
			conn, err := pgx.ConnectConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { conn.Close(context.Background()) })
			_, err = conn.Exec(ctx, `CREATE TABLE orders (id BIGINT PRIMARY KEY, item TEXT)`)
			require.NoError(t, err)

			tx, err := conn.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, `INSERT INTO orders (id, item) VALUES (1, 'book')`)
			require.NoError(t, err)
			res, err := e.SubmitPgxTx(ctx, tx, weft.Submission{Workflow: "tx/order"})
			require.NoError(t, err)
			id := res[0].Task.ID
			_, err = e.Get(ctx, id)
			require.ErrorIs(t, err, weft.ErrNotFound, "the task must not be visible before the caller commits")

			if !commit {
				require.NoError(t, tx.Rollback(ctx))
				_, err := e.Get(ctx, id)
				require.ErrorIs(t, err, weft.ErrNotFound)
				after := submit(t, e, weft.Submission{Workflow: "tx/order"})
				require.Equal(t, "completed", string(wait(t, e, after.Task.ID).State))
				require.EqualValues(t, 1, runs.Load())
				return
			}
			require.NoError(t, tx.Commit(ctx))
			require.Equal(t, "completed", string(wait(t, e, id).State))
			require.EqualValues(t, 1, runs.Load())
		})
	}
}

func TestSubmitTxRefusesOtherTransactions(t *testing.T) {
	t.Parallel()
	e, _, _ := txEngine(t, backends()["sqlite"])
	_, err := e.SubmitTx(context.Background(), nil, weft.Submission{Workflow: "tx/order"})
	require.True(t, errors.Is(err, errors.ErrUnsupported), "got %v", err)
	_, err = e.SubmitPgxTx(context.Background(), nil, weft.Submission{Workflow: "tx/order"})
	require.True(t, errors.Is(err, errors.ErrUnsupported), "got %v", err)
	// SQLite takes no pgx transaction.
	_, err = e.SubmitPgxTx(context.Background(), fakePgxTx{}, weft.Submission{Workflow: "tx/order"})
	require.True(t, errors.Is(err, errors.ErrUnsupported), "got %v", err)
}

// fakePgxTx has the methods of a weft.PgxTx without being pgx's.
type fakePgxTx struct{}

func (fakePgxTx) Commit(context.Context) error   { return nil }
func (fakePgxTx) Rollback(context.Context) error { return nil }
