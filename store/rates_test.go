package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want store.Rate
		text string
	}{
		{"50/s", store.Rate{Limit: 50, Per: time.Second}, "50/s"},
		{"100/m", store.Rate{Limit: 100, Per: time.Minute}, "100/m"},
		{"1000/h", store.Rate{Limit: 1000, Per: time.Hour}, "1000/h"},
		{"5/10s", store.Rate{Limit: 5, Per: 10 * time.Second}, "5/10s"},
		{"5/2m", store.Rate{Limit: 5, Per: 2 * time.Minute}, "5/2m"},
		{"5/1h30m", store.Rate{Limit: 5, Per: 90 * time.Minute}, "5/1h30m"},
		{"5/2h", store.Rate{Limit: 5, Per: 2 * time.Hour}, "5/2h"},
		{"1/500ms", store.Rate{Limit: 1, Per: 500 * time.Millisecond}, "1/500ms"},
		{" 7/s ", store.Rate{Limit: 7, Per: time.Second}, "7/s"},
		{"0", store.Rate{}, "off"},
		{"off", store.Rate{}, "off"},
	} {
		got, err := store.ParseRate(tt.in)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got, tt.in)
		require.Equal(t, tt.text, got.String(), tt.in)
		again, err := store.ParseRate(got.String())
		require.NoError(t, err)
		require.Equal(t, got, again, "String reads back")
	}
	for _, tt := range []struct{ in, want string }{
		{"", "want LIMIT/PER"},
		{"50", "want LIMIT/PER"},
		{"fast/s", "is not a whole number"},
		{"5/week", "is not s, m, h or a duration"},
		{"0/s", "the limit must be from 1 to 1000000, got 0"},
		{"-3/s", "the limit must be from 1 to 1000000, got -3"},
		{"2000000/s", "the limit must be from 1 to 1000000"},
		{"5/0s", "the period must be from 1ms to 24h0m0s, got 0s"},
		{"5/100us", "the period must be from 1ms"},
		{"5/25h", "the period must be from 1ms to 24h0m0s, got 25h0m0s"},
		{"5/1500ns", "the period must be from 1ms"},
	} {
		_, err := store.ParseRate(tt.in)
		require.ErrorIs(t, err, store.ErrInvalid, tt.in)
		require.ErrorContains(t, err, tt.want, tt.in)
	}
}
