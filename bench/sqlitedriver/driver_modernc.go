//go:build modernc

package sqlitedriver

import _ "modernc.org/sqlite" // registers "sqlite" (pure Go, ccgo-translated C)

// DriverLabel and SQLDriver name modernc.org/sqlite. Its DSN (driver_pragma.go)
// uses _pragma=..., which runs busy_timeout first whatever the order. (Recent
// versions also accept mattn's _journal_mode, _busy_timeout, ... keys;
// _pragma works on old and new versions alike.)
const (
	DriverLabel = "modernc"
	SQLDriver   = "sqlite"
)
