package redact_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/redact"
)

func TestString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"url", "postgres://weft:s3cret@db:5432/weft?sslmode=require", "postgres://weft:***@db:5432/weft?sslmode=require"},
		{"postgresql scheme", "postgresql://weft:s3cret@db/weft", "postgresql://weft:***@db/weft"},
		{"url without password", "postgres://weft@db/weft", "postgres://weft@db/weft"},
		{"url without userinfo", "postgres://db/weft", "postgres://db/weft"},
		{"password holding @ and :", "postgres://weft:p@ss:w@rd@db/weft", "postgres://weft:***@db/weft"},
		{"encoded password", "postgres://weft:p%40ss@db/weft", "postgres://weft:***@db/weft"},
		{"query parameter", "postgres://db/weft?user=weft&password=s3cret&sslmode=disable", "postgres://db/weft?user=weft&password=***&sslmode=disable"},
		{"first query parameter", "postgres://db/weft?password=s3cret", "postgres://db/weft?password=***"},
		{"sslpassword parameter", "postgres://db/weft?sslpassword=s3cret", "postgres://db/weft?sslpassword=***"},
		{"both", "postgres://u:a@db/weft?password=b", "postgres://u:***@db/weft?password=***"},
		{"dsn", "host=db user=weft password=s3cret dbname=weft", "host=db user=weft password=*** dbname=weft"},
		{"dsn first", "password=s3cret host=db", "password=*** host=db"},
		{"dsn spaces around =", "host=db password = s3cret dbname=weft", "host=db password = *** dbname=weft"},
		{"dsn quoted", `host=db password='s3 cr\'et' dbname=weft`, `host=db password=*** dbname=weft`},
		{"dsn upper case", "host=db PASSWORD=s3cret", "host=db PASSWORD=***"},
		{"in a message", `cannot parse "postgres://weft:s3cret@db/weft": bad port`, `cannot parse "postgres://weft:***@db/weft": bad port`},
		{"two urls", "a postgres://u:x@h1/d and postgres://v:y@h2/d", "a postgres://u:***@h1/d and postgres://v:***@h2/d"},
		{"sqlite path", "/var/lib/weft.db", "/var/lib/weft.db"},
		{"no password keyword", "host=db user=weft passwordless=1", "host=db user=weft passwordless=1"},
		{"http url", "https://user:tok@example.com/x", "https://user:***@example.com/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, redact.String(tt.in))
		})
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	base := errors.New("base")
	tests := []struct {
		name, dsn string
		err       error
	}{
		{"echoed url", "postgres://weft:s3cret@db/weft", fmt.Errorf("connect postgres://weft:s3cret@db/weft: %w", base)},
		{"echoed bare password", "postgres://weft:s3cret@db/weft", fmt.Errorf("auth with s3cret failed: %w", base)},
		{"decoded password", "postgres://weft:p%40ss@db/weft", fmt.Errorf("password p@ss refused: %w", base)},
		{"dsn quoted", `host=db password='a b'`, fmt.Errorf("config {password:a b}: %w", base)},
		{"query", "postgres://db/weft?password=s3cret", fmt.Errorf("failed: password=s3cret: %w", base)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := redact.Error(tt.err, tt.dsn)
			require.ErrorIs(t, got, base, "the cause is kept")
			for _, s := range redact.Secrets(tt.dsn) {
				require.NotContains(t, got.Error(), s)
			}
			require.Contains(t, got.Error(), redact.Mask)
		})
	}
	require.NoError(t, redact.Error(nil, "postgres://u:p@h/d"))
}

func TestURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"password", "https://alice:s3cret@hooks.example/weft?tenant=7", "https://alice:xxxxx@hooks.example/weft?tenant=7"},
		{"encoded password", "https://alice:p%40ss@hooks.example/", "https://alice:xxxxx@hooks.example/"},
		{"password holding @", "http://alice:p@ss@hooks.example/", "http://alice:xxxxx@hooks.example/"},
		{"user only", "https://alice@hooks.example/", "https://alice@hooks.example/"},
		{"no userinfo", "https://hooks.example/weft", "https://hooks.example/weft"},
		{"shown already", "https://alice:xxxxx@hooks.example/", "https://alice:xxxxx@hooks.example/"},
		{"opaque", "http:alice:s3cret@hooks.example", "http:***"},
		{"does not parse", "https://alice:s3cret@hooks.example:port/", "***"},
		{"relative", "weft/hook", "weft/hook"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, redact.URL(tt.in))
		})
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url, in, want string
	}{
		{"quoted url", "http://alice:s3cret@h/%zz", `request: parse "http://alice:s3cret@h/%zz": invalid URL escape "%zz"`,
			`request: parse "http://alice:***@h/%zz": invalid URL escape "%zz"`},
		{"alone", "http://alice:s3cret@h/", "auth s3cret refused", "auth *** refused"},
		{"decoded", "http://alice:p%40ss@h/", "auth p@ss refused", "auth *** refused"},
		{"nothing to hide", "http://h/", "POST http://h/: 503 Service Unavailable", "POST http://h/: 503 Service Unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, redact.Text(tt.in, tt.url))
		})
	}
}
