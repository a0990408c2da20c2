package sqlstore

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

func TestLoadMigrations(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name     string
		files    fstest.MapFS
		versions []int
		err      string
	}{
		{"in order", fstest.MapFS{"m/002_b.sql": file("B"), "m/001_a.sql": file("A")}, []int{1, 2}, ""},
		{"gap", fstest.MapFS{"m/001_a.sql": file("A"), "m/003_c.sql": file("C")}, nil, "migration 003_c.sql: expected version 002"},
		{"bad name", fstest.MapFS{"m/1_a.sql": file("A")}, nil, "migration 1_a.sql: name it NNN_what.sql"},
		{"duplicate", fstest.MapFS{"m/001_a.sql": file("A"), "m/001_b.sql": file("B")}, nil, "expected version 002"},
		{"no dir", fstest.MapFS{}, nil, "read migrations"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ms, err := LoadMigrations(tt.files, "m")
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			var vs []int
			for _, m := range ms {
				vs = append(vs, m.Version)
			}
			require.Equal(t, tt.versions, vs)
		})
	}
}
