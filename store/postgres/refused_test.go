package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store/postgres"
)

// TestRefusedClassifiesErrors: the errors PostgreSQL gives for a value it
// cannot store are refused (not worth retrying); connection trouble,
// deadlocks, serialization failures and resource shortages are not.
func TestRefusedClassifiesErrors(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("record outcome: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
	}{
		{"NUL in text", pg("22021"), true},
		{"\\u0000 in jsonb", pg("22P05"), true},
		{"invalid json", pg("22P02"), true},
		{"invalid parameter value", pg("22023"), true},
		{"value too large", pg("54000"), true},
		{"not null violation", pg("23502"), true},
		{"undefined column", pg("42703"), true},
		{"connection failure", pg("08006"), false},
		{"serialization failure", pg("40001"), false},
		{"deadlock", pg("40P01"), false},
		{"too many connections", pg("53300"), false},
		{"disk full", pg("53100"), false},
		{"admin shutdown", pg("57P01"), false},
		{"statement cancelled", pg("57014"), false},
		{"internal error", pg("XX000"), false},
		{"connection lost", io.ErrUnexpectedEOF, false},
		{"deadline", context.DeadlineExceeded, false},
		{"other", errors.New("closed pool"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.refused, postgres.Refused(tc.err))
		})
	}
}

// TestRefusedOnRealErrors: what the server answers to the values a bad
// outcome would carry is refused.
func TestRefusedOnRealErrors(t *testing.T) {
	t.Parallel()
	s := openIsolated(t, time.Now, time.Minute).(postgres.Store)
	ctx := context.Background()
	for _, tc := range []struct {
		name, query string
		arg         any
	}{
		{"NUL in text", `SELECT $1::text`, "a\x00b"},
		{"not UTF-8 in text", `SELECT $1::text`, "a\xffb"},
		{"\\u0000 in jsonb", `SELECT $1::text::jsonb`, `"a\u0000b"`},
		{"invalid json", `SELECT $1::text::jsonb`, `{"a":`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out string
			err := s.DB().QueryRowContext(ctx, tc.query, tc.arg).Scan(&out)
			require.Error(t, err)
			require.True(t, postgres.Refused(err), "%v", err)
		})
	}
}
