package sqldb

import (
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
)

// TestAssign: the held writer stores the driver's values in the store's
// scan destinations as database/sql's Rows.Scan would.
func TestAssign(t *testing.T) {
	t.Parallel()
	type named string
	for _, tc := range []struct {
		name string
		dest func() any // a fresh destination
		src  driver.Value
		want any // what the destination points to; nil with err
		err  string
	}{
		{"int64", func() any { return new(int64) }, int64(7), int64(7), ""},
		{"int from int64", func() any { return new(int) }, int64(7), 7, ""},
		{"int32 from int64", func() any { return new(int32) }, int64(7), int32(7), ""},
		{"string", func() any { return new(string) }, "a", "a", ""},
		{"string from bytes", func() any { return new(string) }, []byte("a"), "a", ""},
		{"named string", func() any { return new(state.Step) }, "ready", state.StepReady, ""},
		{"another named string", func() any { return new(named) }, []byte("x"), named("x"), ""},
		{"bytes from string", func() any { return new([]byte) }, "ab", []byte("ab"), ""},
		{"bytes from NULL", func() any { return new([]byte) }, nil, []byte(nil), ""},
		{"raw JSON", func() any { return new(json.RawMessage) }, "{}", json.RawMessage("{}"), ""},
		{"raw JSON from NULL", func() any { return new(json.RawMessage) }, nil, json.RawMessage(nil), ""},
		{"float from int", func() any { return new(float64) }, int64(2), 2.0, ""},
		{"bool from int", func() any { return new(bool) }, int64(1), true, ""},
		{"any", func() any { return new(any) }, int64(3), any(int64(3)), ""},
		{"NullString", func() any { return new(sql.NullString) }, "s", sql.NullString{String: "s", Valid: true}, ""},
		{"NullString from NULL", func() any { return new(sql.NullString) }, nil, sql.NullString{}, ""},
		{"NullInt64", func() any { return new(sql.NullInt64) }, int64(5), sql.NullInt64{Int64: 5, Valid: true}, ""},
		{"NullFloat64 from int", func() any { return new(sql.NullFloat64) }, int64(5), sql.NullFloat64{Float64: 5, Valid: true}, ""},
		{"NULL into a string", func() any { return new(string) }, nil, nil, "converting NULL to string is unsupported"},
		{"NULL into an int64", func() any { return new(int64) }, nil, nil, "converting NULL to int64 is unsupported"},
		{"text into an int64", func() any { return new(int64) }, "7", int64(7), ""},
		{"not a number into an int64", func() any { return new(int64) }, "x", nil, "invalid syntax"},
		{"an int into a string", func() any { return new(string) }, int64(7), "7", ""},
		{"a float into a string", func() any { return new(string) }, 1.5, "1.5", ""},
		{"text into a float", func() any { return new(float64) }, "1.5", 1.5, ""},
		{"text into a bool", func() any { return new(bool) }, "true", true, ""},
		{"too big for an int8", func() any { return new(int8) }, int64(300), nil, "out of range"},
		{"a time", func() any { return new(string) }, time.Unix(0, 0), nil, "unsupported Scan"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := tc.dest()
			err := assign(d, tc.src)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, derefValue(d))
		})
	}
	// Bytes are copied: the driver may reuse its buffer.
	src := []byte("abc")
	var b []byte
	require.NoError(t, assign(&b, src))
	src[0] = 'x'
	require.Equal(t, "abc", string(b))
}

// derefValue returns what a pointer destination points to.
func derefValue(d any) any { return reflect.ValueOf(d).Elem().Interface() }

// TestDriverValue: arguments reach the driver as database/sql would pass
// them.
func TestDriverValue(t *testing.T) {
	t.Parallel()
	n := int64(4)
	var none *int64
	for _, tc := range []struct {
		name string
		arg  any
		want driver.Value
	}{
		{"int64", int64(1), int64(1)},
		{"int", 2, int64(2)},
		{"string", "s", "s"},
		{"named string", state.StepReady, "ready"},
		{"raw JSON", json.RawMessage(`{"a":1}`), []byte(`{"a":1}`)},
		{"no raw JSON", json.RawMessage(nil), nil},
		{"pointer", &n, int64(4)},
		{"nil pointer", none, nil},
		{"nil", nil, nil},
		{"NullString", sql.NullString{String: "v", Valid: true}, "v"},
		{"invalid NullString", sql.NullString{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := driverValue(tc.arg)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
