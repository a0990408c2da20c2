// Package sqlitedriver compares SQLite drivers for weft's queue workload
// through database/sql. Exactly one driver is compiled in, chosen by build
// tag (mattn, modernc or ncruces): mattn's and ncruces' drivers both register
// the name "sqlite3", so they cannot share a binary, and one driver per binary
// also gives honest build times and binary sizes. See README.md.
package sqlitedriver

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
)

// BusyTimeoutMS is the busy_timeout every benchmark connection uses.
const BusyTimeoutMS = 5000

// Schema is the benchmark's simplified steps table (the queue).
const Schema = `
CREATE TABLE IF NOT EXISTS steps (
	id        INTEGER PRIMARY KEY,
	task_id   INTEGER,
	name      TEXT,
	state     TEXT,
	sort_key  INTEGER,
	attempt   INTEGER,
	engine_id TEXT,
	result    BLOB
);
CREATE INDEX IF NOT EXISTS steps_ready ON steps (sort_key) WHERE state = 'ready';
`

const (
	InsertSQL   = `INSERT INTO steps (task_id, name, state, sort_key, attempt, engine_id, result) VALUES (?, ?, 'ready', ?, 0, '', NULL)`
	ClaimSQL    = `UPDATE steps SET state = 'running', attempt = attempt + 1, engine_id = ? WHERE id IN (SELECT id FROM steps WHERE state = 'ready' ORDER BY sort_key LIMIT 100) RETURNING id, task_id, name`
	CompleteSQL = `UPDATE steps SET state = 'completed', result = ? WHERE id = ?`
	PointSQL    = `SELECT id, task_id, name, state, sort_key, attempt, engine_id, result FROM steps WHERE id = ?`
)

// Open opens path with the compiled-in driver: WAL, synchronous=NORMAL,
// busy_timeout 5000, foreign_keys off, BEGIN IMMEDIATE transactions, and a
// single connection (the write connection).
func Open(path string) (*sql.DB, error) {
	if SQLDriver == "" {
		return nil, fmt.Errorf("no SQLite driver compiled in: build with -tags mattn, modernc or ncruces")
	}
	db, err := sql.Open(SQLDriver, DSN(path, BusyTimeoutMS, "immediate"))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if _, err := db.Exec(Schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("schema: %w", err)
	}
	return db, nil
}

// Fill inserts n ready steps, batch rows per transaction, through a prepared
// statement. sort_key is mostly increasing with local disorder (ready time
// with jitter), as weft's "ready time minus priority" key is.
func Fill(ctx context.Context, db *sql.DB, ins *sql.Stmt, rng *rand.Rand, next *int64, n, batch int) error {
	for done := 0; done < n; {
		m := min(batch, n-done)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		st := tx.StmtContext(ctx, ins)
		for j := 0; j < m; j++ {
			*next++
			k := *next
			if _, err := st.ExecContext(ctx, k/8, stepNames[k%int64(len(stepNames))], k*16+rng.Int64N(4096)); err != nil {
				tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		done += m
	}
	return nil
}

var stepNames = []string{"fetch", "parse", "transform", "validate", "store", "notify", "cleanup", "report"}
