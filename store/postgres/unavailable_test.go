package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// TestUnavailable classifies driver errors: those that say the server
// cannot be reached wrap store.ErrUnavailable, the others are left alone.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"admin shutdown", &pgconn.PgError{Code: "57P01", Severity: "FATAL"}, true},
		{"cannot connect now", &pgconn.PgError{Code: "57P03", Severity: "FATAL"}, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"syntax error", fmt.Errorf("claim: %w", &pgconn.PgError{Code: "42601"}), false},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"eof", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), true},
		{"caller's deadline", fmt.Errorf("acquire: %w", context.DeadlineExceeded), false},
		{"caller cancelled", context.Canceled, false},
		{"not found", store.ErrNotFound, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := unavailable(tc.err)
			require.Equal(t, tc.want, errors.Is(got, store.ErrUnavailable), "%v", got)
			if tc.err != nil {
				require.ErrorIs(t, got, tc.err, "the driver's error stays in the chain")
			}
		})
	}
}
