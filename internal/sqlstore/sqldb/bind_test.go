package sqldb

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBinder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		numbered bool
		q, want  string
	}{
		{"unchanged", false, "SELECT ? WHERE a = ?", "SELECT ? WHERE a = ?"},
		{"numbered", true, "SELECT ? WHERE a = ? AND b IN (?, ?)", "SELECT $1 WHERE a = $2 AND b IN ($3, $4)"},
		{"past nine", true, "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"},
		{"none", true, "SELECT 1", "SELECT 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := NewBinder(tc.numbered)
			require.Equal(t, tc.want, b.Bind(tc.q))
			require.Equal(t, tc.want, b.Bind(tc.q), "the kept form")
		})
	}
}
