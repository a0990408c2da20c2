package sqlite

import (
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
