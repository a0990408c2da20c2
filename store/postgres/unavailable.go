package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weftrun/weft/store"
)

// unavailable wraps with store.ErrUnavailable an error that says the
// database could not be reached, rather than that it refused the statement:
// callers (the REST server) then answer "try again later" instead of
// "internal error", and pgxpool reconnects by itself once the server is
// back.
func unavailable(err error) error {
	if err == nil || errors.Is(err, store.ErrUnavailable) || !isUnavailable(err) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
}

func isUnavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The caller's own deadline or cancellation, including a wait for
		// a pool connection: the caller maps it.
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "57P01", // admin_shutdown
			pe.Code == "57P02",                       // crash_shutdown
			pe.Code == "57P03",                       // cannot_connect_now (starting up, shutting down, recovering)
			pe.Code == "53300",                       // too_many_connections
			len(pe.Code) == 5 && pe.Code[:2] == "08": // connection_exception
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.As(err, &ce), errors.As(err, &ne),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	}
	// A statement on a connection the server closed meanwhile.
	return pgconn.SafeToRetry(err) || isClosedConn(err)
}

// isClosedConn reports pgconn's error for a connection already closed.
func isClosedConn(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if err.Error() == "conn closed" {
			return true
		}
	}
	return false
}
