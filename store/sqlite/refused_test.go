package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/mattn/go-sqlite3"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store/sqlite"
)

// TestRefusedClassifiesErrors: SQLite's errors for a statement or value it
// refuses are refused; a busy or locked database, I/O trouble and anything
// that is not SQLite's are passing.
func TestRefusedClassifiesErrors(t *testing.T) {
	t.Parallel()
	lite := func(code sqlite3.ErrNo) error { return fmt.Errorf("record outcome: %w", sqlite3.Error{Code: code}) }
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
	}{
		{"constraint", lite(sqlite3.ErrConstraint), true},
		{"too big", lite(sqlite3.ErrTooBig), true},
		{"mismatch", lite(sqlite3.ErrMismatch), true},
		{"sql error", lite(sqlite3.ErrError), true},
		{"busy", lite(sqlite3.ErrBusy), false},
		{"locked", lite(sqlite3.ErrLocked), false},
		{"io", lite(sqlite3.ErrIoErr), false},
		{"full", lite(sqlite3.ErrFull), false},
		{"interrupted", lite(sqlite3.ErrInterrupt), false},
		{"deadline", context.DeadlineExceeded, false},
		{"other", errors.New("sql: database is closed"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.refused, sqlite.Refused(tc.err))
		})
	}
}

// TestUnavailableClassifiesErrors: a full disk and the disk failing a
// write or sync make the database unavailable for now; other errors do
// not.
func TestUnavailableClassifiesErrors(t *testing.T) {
	t.Parallel()
	io := func(ext sqlite3.ErrNoExtended) error {
		return fmt.Errorf("commit: %w", sqlite3.Error{Code: sqlite3.ErrIoErr, ExtendedCode: ext})
	}
	for _, tc := range []struct {
		name        string
		err         error
		unavailable bool
	}{
		{"full", fmt.Errorf("insert: %w", sqlite3.Error{Code: sqlite3.ErrFull}), true},
		{"write", io(sqlite3.ErrIoErrWrite), true},
		{"fsync", io(sqlite3.ErrIoErrFsync), true},
		{"truncate", io(sqlite3.ErrIoErrTruncate), true},
		{"read", io(sqlite3.ErrIoErrRead), false},
		{"constraint", sqlite3.Error{Code: sqlite3.ErrConstraint}, false},
		{"busy", sqlite3.Error{Code: sqlite3.ErrBusy}, false},
		{"other", errors.New("sql: database is closed"), false},
	} {
		require.Equal(t, tc.unavailable, sqlite.Unavailable(tc.err), tc.name)
	}
}
