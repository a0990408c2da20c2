package sqlstore

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSameColumns(t *testing.T) {
	t.Parallel()
	cols := []column{{"n", colInt}, {"s", colText}, {"j", colJSON}}
	for _, tc := range []struct {
		name string
		rows [][]any
		want []bool
	}{
		{"one row varies", [][]any{{int64(1), "a", json.RawMessage(`1`)}}, []bool{false, false, false}},
		{"no rows", nil, []bool{false, false, false}},
		{"constant columns travel once", [][]any{{int64(1), "a", json.RawMessage(nil)}, {int64(2), "a", json.RawMessage(nil)}}, []bool{false, true, true}},
		{"NULL differs from JSON", [][]any{{int64(1), "a", json.RawMessage(nil)}, {int64(1), "b", json.RawMessage(`null`)}}, []bool{true, false, false}},
		{"JSON compares by text", [][]any{{int64(1), "a", json.RawMessage(`{"x":1}`)}, {int64(2), "a", json.RawMessage(`{"x":2}`)}}, []bool{false, true, false}},
		{"one column left to vary", [][]any{{int64(1), "a", json.RawMessage(`1`)}, {int64(1), "a", json.RawMessage(`1`)}}, []bool{false, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, sameColumns(cols, tc.rows))
		})
	}
}
