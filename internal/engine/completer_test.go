package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// TestTransient: only what the store marks refused, or weft's own checks
// mark invalid, is not retried; everything else is taken to pass.
func TestTransient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		err       error
		transient bool
	}{
		{"refused by the database", fmt.Errorf("record outcomes: %w", store.Refused(errors.New("SQLSTATE 22021"))), false},
		{"invalid", fmt.Errorf("%w outcome", store.ErrInvalid), false},
		{"connection lost", io.ErrUnexpectedEOF, true},
		{"deadline", fmt.Errorf("begin: %w", context.DeadlineExceeded), true},
		{"unknown", errors.New("failed to connect"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.transient, transient(tc.err))
		})
	}
	// Refused keeps the message and the wrapped error.
	inner := errors.New("ERROR: invalid byte sequence (SQLSTATE 22021)")
	err := store.Refused(inner)
	require.Equal(t, inner.Error(), err.Error())
	require.ErrorIs(t, err, inner)
	require.ErrorIs(t, err, store.ErrRefused)
}
