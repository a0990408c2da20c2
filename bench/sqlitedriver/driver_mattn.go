//go:build mattn

package sqlitedriver

import (
	"strconv"

	_ "github.com/mattn/go-sqlite3" // registers "sqlite3" (cgo)
)

const (
	DriverLabel = "mattn"
	SQLDriver   = "sqlite3"
)

// DSN for github.com/mattn/go-sqlite3. Its own query keys set the PRAGMAs on
// every new connection; _txlock=immediate makes BeginTx issue BEGIN IMMEDIATE.
// mattn sets busy_timeout=5000 by default, so the key is given explicitly.
func DSN(path string, busyMS int, txlock string) string {
	q := "_journal_mode=WAL&_synchronous=NORMAL&_busy_timeout=" + strconv.Itoa(busyMS) + "&_foreign_keys=off"
	if txlock != "" {
		q += "&_txlock=" + txlock
	}
	return "file:" + path + "?" + q
}
