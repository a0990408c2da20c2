//go:build modernc

package sqlitedriver

import (
	"strconv"

	_ "modernc.org/sqlite" // registers "sqlite" (pure Go, ccgo-translated C)
)

const (
	DriverLabel = "modernc"
	SQLDriver   = "sqlite"
)

// DSN for modernc.org/sqlite. _pragma=... runs on every new connection
// (busy_timeout is always applied first); _txlock=immediate makes BeginTx
// issue BEGIN IMMEDIATE. (Recent versions also accept mattn's _journal_mode,
// _busy_timeout, ... keys; _pragma works on old and new versions alike.)
func DSN(path string, busyMS int, txlock string) string {
	q := "_pragma=busy_timeout(" + strconv.Itoa(busyMS) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(0)"
	if txlock != "" {
		q += "&_txlock=" + txlock
	}
	return "file:" + path + "?" + q
}
