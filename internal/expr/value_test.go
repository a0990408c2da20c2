package expr

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValue(t *testing.T) {
	t.Parallel()
	input := json.RawMessage(`{"order": 7, "items": ["a", "b"]}`)
	deps := map[string]json.RawMessage{"quote": json.RawMessage(`{"amount": 12.5}`)}
	for _, tc := range []struct {
		src, want, compileErr, evalErr string
	}{
		{src: `{"order": input.order, "price": deps.quote.amount}`, want: `{"order": 7, "price": 12.5}`},
		{src: `{"first": input.items[0], "n": size(input.items), "ok": true, "none": null}`, want: `{"first": "a", "n": 2, "ok": true, "none": null}`},
		{src: `input`, want: `{"order": 7, "items": ["a", "b"]}`},
		{src: `{}`, want: `{}`},
		{src: `1 + 2`, compileErr: "not a map"},
		{src: `{"a": `, compileErr: "invalid expression"},
		{src: `input.items`, evalErr: "not an object"},
		{src: `{"x": input.missing}`, evalErr: "no such key"},
	} {
		v, err := CompileValue(tc.src)
		if tc.compileErr != "" {
			require.ErrorContains(t, err, tc.compileErr, tc.src)
			continue
		}
		require.NoError(t, err, tc.src)
		got, err := v.Eval(input, deps)
		if tc.evalErr != "" {
			require.ErrorContains(t, err, tc.evalErr, tc.src)
			continue
		}
		require.NoError(t, err, tc.src)
		require.JSONEq(t, tc.want, string(got), tc.src)
	}
}
