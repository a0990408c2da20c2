package sqlite

import (
	"errors"

	"github.com/mattn/go-sqlite3" // registers "sqlite3"; see docs/dependencies.md
)

const driverName = "sqlite3"

// isBusy reports SQLite's "database is locked" (another connection holds
// the lock it needs).
func isBusy(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked)
}

// isCantOpen reports SQLite's "unable to open database file", which a file
// in WAL mode gives when its shared-memory file cannot be created.
func isCantOpen(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrCantOpen
}
