//go:build ncruces

package sqlitedriver

// registers "sqlite3". Since v0.33 the SQLite build is compiled into the
// module (wasm translated to Go by wasm2go); the old
// github.com/ncruces/go-sqlite3/embed import is deprecated and only
// prints a warning at start-up, so it is not imported.
import _ "github.com/ncruces/go-sqlite3/driver"

// DriverLabel and SQLDriver name github.com/ncruces/go-sqlite3/driver. Its DSN
// (driver_pragma.go) runs the _pragma keys in the order given, busy_timeout
// first as its docs ask; without any _pragma the driver would set a 1-minute
// busy timeout of its own.
const (
	DriverLabel = "ncruces"
	SQLDriver   = "sqlite3"
)
