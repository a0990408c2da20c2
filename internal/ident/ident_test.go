package ident_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/ident"
)

func TestValid(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"shop.checkout-v2_1", true},
		{"9lives", true},
		{strings.Repeat("x", ident.MaxLen), true},
		{"", false},
		{strings.Repeat("x", ident.MaxLen+1), false},
		{"_a", false},
		{".a", false},
		{"-a", false},
		{"a b", false},
		{"a/b", false},
		{"a@1", false},
		{"é", false},
		{"a\x00", false},
		{"a\n", false},
	} {
		require.Equal(t, tt.ok, ident.Valid(tt.name), "%q", tt.name)
	}
	require.Contains(t, ident.Rule, strconv.Itoa(ident.MaxLen), "the rule states the bound")
}
