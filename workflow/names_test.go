package workflow_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/workflow"
)

func TestCheckNames(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		names []string
		index int // -1: accepted
		twice bool
	}{
		{nil, -1, false},
		{[]string{"shop", "billing.eu", "a-1_b"}, -1, false},
		{[]string{"shop", "bad ns"}, 1, false},
		{[]string{"", "shop"}, 0, false},
		{[]string{"shop", "billing", "shop"}, 2, true},
	} {
		err := workflow.CheckNames(tt.names)
		if tt.index < 0 {
			require.NoError(t, err, "%q", tt.names)
			continue
		}
		var ne *workflow.NameError
		require.True(t, errors.As(err, &ne), "%q", tt.names)
		require.Equal(t, tt.index, ne.Index, "%q", tt.names)
		require.Equal(t, tt.twice, ne.Twice, "%q", tt.names)
	}
}
