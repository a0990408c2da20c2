package store_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// TestFieldError: a FieldError is an ErrInvalid that errors.As finds
// through wrapping, with its field and problem; the shared checks name
// their field.
func TestFieldError(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("submission for ns/wf: %w", store.Invalidf("priority", "must be from %d to %d", -1, 1))
	require.ErrorIs(t, err, store.ErrInvalid)
	require.Equal(t, "submission for ns/wf: invalid priority: must be from -1 to 1", err.Error())
	var fe *store.FieldError
	require.True(t, errors.As(err, &fe))
	require.Equal(t, store.FieldError{Field: "priority", Problem: "must be from -1 to 1"}, *fe)

	_, rateErr := store.ParseRate("fast")
	_, _, targetErr := store.ParseTarget("a/b/c")
	_, schedErr := store.ParseScheduleRef("a/b")
	for _, tc := range []struct {
		field string
		err   error
	}{
		{"tags", store.ValidateTags(map[string]string{"bad key": "1"})},
		{"tags", store.ValidateTag("k", "")},
		{"rate", rateErr},
		{"target", targetErr},
		{"schedule", schedErr},
		{"concurrency", store.CheckConcurrency(-1)},
		{"weight", store.CheckWeight(-1)},
		{"key", store.BreakerReset{Key: "a/b"}.Validate()},
	} {
		var fe *store.FieldError
		require.True(t, errors.As(tc.err, &fe), "%s: %v", tc.field, tc.err)
		require.Equal(t, tc.field, fe.Field, "%v", tc.err)
	}
}
