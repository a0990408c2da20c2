package sqldb

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// kinds classifies errors by their text, for the test.
type kinds struct{}

func (kinds) Refused(err error) bool     { return err.Error() == "refused" }
func (kinds) Unavailable(err error) bool { return err.Error() == "full" }
func (kinds) Contended(err error) bool   { return err.Error() == "deadlock" }

func TestWriteErr(t *testing.T) {
	t.Parallel()
	marked := fmt.Errorf("%w: %w", store.ErrUnavailable, errors.New("gone"))
	for _, tc := range []struct {
		name string
		err  error
		is   error // nil: returned as it is
	}{
		{"refused", errors.New("refused"), store.ErrRefused},
		{"unavailable", errors.New("full"), store.ErrUnavailable},
		{"contended", errors.New("deadlock"), store.ErrContended},
		{"passing", errors.New("lost"), nil},
		{"marked already", marked, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := WriteErr(kinds{}, tc.err)
			require.ErrorIs(t, got, tc.err)
			if tc.is == nil {
				require.Equal(t, tc.err, got)
				return
			}
			require.ErrorIs(t, got, tc.is)
		})
	}
	require.NoError(t, WriteErr(kinds{}, nil))
}
