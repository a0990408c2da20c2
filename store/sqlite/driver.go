package sqlite

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/mattn/go-sqlite3" // registers "sqlite3"; see docs/dependencies.md
)

const driverName = "sqlite3"

// writerDriverName is the driver of the store's writer connection: the
// SQLite driver with the writer's wal_autocheckpoint set on every
// connection it opens (checkpoint.go).
const writerDriverName = "sqlite3-weft-writer"

func init() {
	sql.Register(writerDriverName, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec(fmt.Sprintf("PRAGMA wal_autocheckpoint = %d", walSafety), nil)
		return err
	}})
}

// isBusy reports SQLite's "database is locked" (another connection holds
// the lock it needs).
func isBusy(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked)
}

// isCantOpen reports what a file in WAL mode gives when its shared-memory
// file cannot be created: "unable to open database file", or, in a
// directory the process cannot write, "attempt to write a readonly
// database".
func isCantOpen(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.Code == sqlite3.ErrCantOpen || se.Code == sqlite3.ErrReadonly)
}
