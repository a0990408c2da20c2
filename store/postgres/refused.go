package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// refused reports whether err is PostgreSQL refusing a statement for what
// it carries or does, so that the same statement would be refused again:
// an error the server sent (SQLSTATE) outside the classes of passing
// trouble. Those are 08 connection exception, 40 transaction rollback
// (serialization failure, deadlock), 53 insufficient resources (too many
// connections, disk full, out of memory), 57 operator intervention (admin
// shutdown, cancelled statement, crash recovery), 58 system error and XX
// internal error. Anything that is not a server error (a connection lost,
// a context that ended) is passing too.
//
// The codes a bad value of a step's outcome gets are in class 22 (22021
// character_not_in_repertoire for a NUL or bytes that are not UTF-8,
// 22P05 untranslatable_character for \u0000 in jsonb, 22P02 and 22023 for
// JSON that is not valid) or 54 (54000 program_limit_exceeded for a value
// too large).
func refused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "08", "40", "53", "57", "58", "XX":
		return false
	}
	return true
}

// contended reports whether err is PostgreSQL giving a transaction up for
// its clash with concurrent ones: a serialization failure (40001) or a
// deadlock (40P01). The same transaction run again may pass.
func contended(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}
