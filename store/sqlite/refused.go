package sqlite

import (
	"errors"

	"github.com/mattn/go-sqlite3"
)

// refused reports whether err is SQLite refusing a statement for what it
// carries or does, so that the same statement would be refused again: a
// constraint, a value too big or of the wrong type, an SQL error. Busy and
// locked databases, I/O errors, a full disk and interrupted statements are
// passing, as is anything that is not an error of SQLite. SQLite itself
// stores NUL characters and bytes that are not UTF-8 in text; weft keeps
// them out anyway (see internal/textsafe), so that both stores hold the
// same data.
func refused(err error) bool {
	var e sqlite3.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case sqlite3.ErrError, sqlite3.ErrConstraint, sqlite3.ErrTooBig, sqlite3.ErrMismatch, sqlite3.ErrRange:
		return true
	}
	return false
}

// unavailable reports whether err is SQLite unable to write for a reason
// outside the database that passes: a full disk (SQLITE_FULL, also what
// PRAGMA max_page_count gives) or the disk failing a write or a sync
// (SQLITE_IOERR's write, fsync and truncate kinds, which a full disk can
// give too). The store marks such write errors store.ErrUnavailable: the
// API answers 503 with Retry-After, and the engine retries with backoff
// what it has to write, so nothing accepted is lost once space returns.
func unavailable(err error) bool {
	var e sqlite3.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case sqlite3.ErrFull:
		return true
	case sqlite3.ErrIoErr:
		switch e.ExtendedCode {
		case sqlite3.ErrIoErrWrite, sqlite3.ErrIoErrFsync, sqlite3.ErrIoErrDirFsync, sqlite3.ErrIoErrTruncate, sqlite3.ErrIoErrSHMSize:
			return true
		}
	}
	return false
}
