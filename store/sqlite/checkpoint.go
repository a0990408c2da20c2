package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
)

// This file moves the WAL's checkpoints off the writer. SQLite checkpoints
// in the connection whose commit took the WAL past wal_autocheckpoint
// pages: that commit then copies the WAL into the database file, a few
// milliseconds during which every write of the process waits (the p95 of
// a 7-step DAG was twice its p50). Here a connection of its own
// checkpoints, PASSIVE (it waits for nobody and nobody waits for it),
// after writes came; the writer checkpoints itself only past walSafety
// pages, should that connection fall that far behind.

// walSafety is the writer's wal_autocheckpoint, in pages (64 MiB of 4 KiB
// pages).
const walSafety = 16384

// checkpointAfter is how long the checkpointer gathers writes before it
// checkpoints them: at most one checkpoint this often while writes come,
// none while none do.
const checkpointAfter = 50 * time.Millisecond

// checkpointer checkpoints the WAL on its own connection after writes.
type checkpointer struct {
	db      *sql.DB
	conn    *sql.Conn     // db's one connection, held from the start
	path    string        // the database file's path
	opened  os.FileInfo   // the file the store opened at path (checkFile)
	wal     string        // the WAL file's path
	kick    chan struct{} // a write committed
	stop    chan struct{}
	stopped chan struct{}
}

// startCheckpointer checkpoints the WAL of the database file opened at
// path on a connection of db that it opens now and holds: one opened
// later, after the file at path was replaced, would copy this file's WAL
// into the other file.
func startCheckpointer(ctx context.Context, db *sql.DB, path string, opened os.FileInfo) (*checkpointer, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("checkpointer: %w", err)
	}
	c := &checkpointer{db: db, conn: conn, path: path, opened: opened, wal: path + "-wal",
		kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	go c.run()
	return c, nil
}

// wrote tells the checkpointer that a write committed.
func (c *checkpointer) wrote() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run() {
	defer close(c.stopped)
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	// The WAL file as the last checkpoint left it: a transaction that
	// wrote nothing (a claim that found no work) leaves it as it was, and
	// needs no checkpoint.
	var last os.FileInfo
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		wait.Reset(checkpointAfter)
		select {
		case <-c.stop:
			return
		case <-wait.C:
		}
		wal, err := os.Stat(c.wal)
		if err != nil || (last != nil && wal.Size() == last.Size() && wal.ModTime().Equal(last.ModTime())) || checkFile(c.path, c.opened) != nil {
			// Nothing new, or the files at the path are no longer the
			// ones this connection writes (deleted, replaced: the engine
			// reports it, store.ErrDatabaseGone): leave them alone.
			continue
		}
		// Its errors are not the writes' (a busy checkpoint lock, a full
		// disk the writes see too): the next write brings it back, and
		// walSafety bounds the WAL meanwhile.
		_, _ = c.conn.ExecContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`)
		last = wal
	}
}

// close stops the checkpointer and closes its connection.
func (c *checkpointer) close() error {
	close(c.stop)
	<-c.stopped
	return errors.Join(c.conn.Close(), c.db.Close())
}

// checkpointedDB is the store's DB: each write that commits tells the
// checkpointer. Its reads, snapshots included, are the SQLDB's.
type checkpointedDB struct {
	*sqldb.SQLDB
	ck *checkpointer
}

func (d checkpointedDB) Begin(ctx context.Context) (sqldb.Tx, error) {
	tx, err := d.SQLDB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return checkpointedTx{tx, d.ck}, nil
}

func (d checkpointedDB) Exec(ctx context.Context, q string, args ...any) (sqldb.Result, error) {
	res, err := d.SQLDB.Exec(ctx, q, args...)
	if err == nil {
		d.ck.wrote()
	}
	return res, err
}

func (d checkpointedDB) Close() error {
	return errors.Join(d.ck.close(), d.SQLDB.Close())
}

// checkpointedTx is a write transaction that tells the checkpointer when
// it commits.
type checkpointedTx struct {
	sqldb.Tx
	ck *checkpointer
}

func (t checkpointedTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	if err == nil {
		t.ck.wrote()
	}
	return err
}
