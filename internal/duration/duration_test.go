package duration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFormatParsesBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{10 * time.Millisecond, "10ms"},
		{90 * time.Second, "1m30s"},
		{2 * time.Minute, "2m"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{25 * time.Hour, "25h"},
		{24 * time.Hour, "1d"},
		{7 * 24 * time.Hour, "7d"},
		{7*24*time.Hour + time.Second, "168h0m1s"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Format(tt.d))
			back, err := Parse(Format(tt.d))
			require.NoError(t, err)
			require.Equal(t, tt.d, back)
		})
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "7", "-1s", "1.5d", "-2d", "100001d", "d", "1w"} {
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(s)
			require.Error(t, err)
		})
	}
}
