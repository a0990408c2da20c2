package sqlite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/sqlstore"
)

// Refused exposes refused to the tests.
var Refused = refused

// MemoryCounted exposes memoryCounted to the tests.
var MemoryCounted = memoryCounted

// WithSchemaWait sets how long a read-only open waits for a schema that
// does not advance, and a function called at each look.
func WithSchemaWait(o *Options, stall time.Duration, polled func(version int)) {
	o.schemaStall, o.schemaPolled = stall, polled
}

// Migrations returns the store's migrations.
func Migrations() ([]sqlstore.Migration, error) {
	return sqlstore.LoadMigrations(migrations, "migrations")
}

// SetMaxPageCount sets PRAGMA max_page_count on the store's writer
// connection, so that writes needing more pages fail with SQLITE_FULL as on
// a full disk. 0 caps the file at the pages it has now and fills its free
// pages, so that no write that needs a new page fits.
func (s Store) SetMaxPageCount(ctx context.Context, n int64) error {
	if n > 0 {
		_, err := s.db.Exec(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", n))
		return err
	}
	if _, err := s.db.Exec(ctx, "CREATE TABLE IF NOT EXISTS test_fill (b BLOB)"); err != nil {
		return err
	}
	if _, err := s.db.Exec(ctx, "PRAGMA max_page_count = 1"); err != nil { // set to the file's size
		return err
	}
	for i := 0; i < 1_000_000; i++ {
		if _, err := s.db.Exec(ctx, "INSERT INTO test_fill VALUES (randomblob(1000))"); err != nil {
			if unavailable(err) {
				return nil
			}
			return err
		}
	}
	return errors.New("the file never filled")
}

// Unavailable exposes unavailable to the tests.
var Unavailable = unavailable
