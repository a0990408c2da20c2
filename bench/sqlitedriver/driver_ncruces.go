//go:build ncruces

package sqlitedriver

import (
	"strconv"

	// registers "sqlite3". Since v0.33 the SQLite build is compiled into the
	// module (wasm translated to Go by wasm2go); the old
	// github.com/ncruces/go-sqlite3/embed import is deprecated and only
	// prints a warning at start-up, so it is not imported.
	_ "github.com/ncruces/go-sqlite3/driver"
)

const (
	DriverLabel = "ncruces"
	SQLDriver   = "sqlite3"
)

// DSN for github.com/ncruces/go-sqlite3/driver. _pragma=... runs on every new
// connection in the order given (busy_timeout first, as its docs ask); without
// any _pragma the driver sets a 1-minute busy timeout of its own.
// _txlock=immediate makes BeginTx issue BEGIN IMMEDIATE.
func DSN(path string, busyMS int, txlock string) string {
	q := "_pragma=busy_timeout(" + strconv.Itoa(busyMS) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(0)"
	if txlock != "" {
		q += "&_txlock=" + txlock
	}
	return "file:" + path + "?" + q
}
