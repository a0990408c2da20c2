package weftdb_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/weftdb"
)

// TestRedact: every form of PostgreSQL connection string loses its
// password (the full table is in internal/redact).
func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://weft:s3cret@db/weft", "postgres://weft:***@db/weft"},
		{"postgres://db/weft?sslmode=disable&password=s3cret", "postgres://db/weft?sslmode=disable&password=***"},
		{"host=db user=weft password=s3cret dbname=weft", "host=db user=weft password=*** dbname=weft"},
		{"host=db password='s 3'", "host=db password=***"},
		{"./weft.db", "./weft.db"},
		{"postgres://weft:wr ong@db/weft", "postgres://weft:***@db/weft"},
		{`postgres://weft:p"ss@db/weft`, "postgres://weft:***@db/weft"},
		{"postgres://weft:a@b c@db/weft", "postgres://weft:***@db/weft"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, weftdb.Redact(tt.in), tt.in)
	}
}

// TestIsPostgres: keyword/value DSNs name PostgreSQL too.
func TestIsPostgres(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{"postgres://db/weft", true},
		{"postgresql://db/weft", true},
		{"host=db dbname=weft password=x", true},
		{"user=weft host=/run/postgresql", true},
		{"./weft.db", false},
		{"sqlite://x.db", false},
		{"data/host=x.db", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, weftdb.IsPostgres(tt.in), tt.in)
	}
}
