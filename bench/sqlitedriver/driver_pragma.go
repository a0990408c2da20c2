//go:build modernc || ncruces

package sqlitedriver

import "strconv"

// DSN for the drivers that take _pragma=... keys (modernc.org/sqlite and
// github.com/ncruces/go-sqlite3/driver): each runs on every new connection in
// the order given, busy_timeout first; _txlock=immediate makes BeginTx issue
// BEGIN IMMEDIATE.
func DSN(path string, busyMS int, txlock string) string {
	q := "_pragma=busy_timeout(" + strconv.Itoa(busyMS) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(0)"
	if txlock != "" {
		q += "&_txlock=" + txlock
	}
	return "file:" + path + "?" + q
}
