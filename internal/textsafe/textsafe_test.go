package textsafe

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"", ""},
		{"a\x00b", "a\uFFFDb"},
		{"a\xffb", "a\uFFFDb"},
		{"\x00\xfe\xff", "\uFFFD\uFFFD"}, // ToValidUTF8 joins a run of bad bytes
		{"héllo ✓", "héllo ✓"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, String(tc.in))
			require.True(t, Storable(String(tc.in)))
			require.Equal(t, tc.in == tc.want, Check(tc.in) == nil)
		})
	}
}

func TestFind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc, path string
		err             error
	}{
		{"clean object", `{"a":"b","c":[1,true,null,{"d":"e"}]}`, "", nil},
		{"clean scalar", `12.5e3`, "", nil},
		{"escaped backslash then u0000", `{"a":"\\u0000"}`, "", nil},
		{"surrogate pair", `"\ud83d\ude00"`, "", nil},
		{"nul at top", `"a\u0000b"`, "", ErrNUL},
		{"nul in field", `{"a":{"b":"x\u0000"}}`, "a.b", ErrNUL},
		{"nul in key", `{"a":{"k\u0000":1}}`, `a.k\u0000`, ErrNUL},
		{"nul in array", `{"a":[1,"ok","\u0000"]}`, "a[2]", ErrNUL},
		{"not utf8", "{\"a\":[\"\xff\"]}", "a[0]", ErrNotUTF8},
		{"not utf8 key", "{\"k\xff\":1}", "k\uFFFD", ErrNotUTF8},
		{"lone high surrogate", `{"a":"\ud800x"}`, "a", ErrSurrogate},
		{"lone low surrogate", `{"a":"\udc00"}`, "a", ErrSurrogate},
		{"upper-case escape", `{"a":"\U0000"}`, "", nil}, // not valid JSON: whatever, no panic
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, err := Find([]byte(tc.doc))
			require.ErrorIs(t, err, tc.err)
			if tc.err != nil {
				require.Equal(t, tc.path, path)
			}
		})
	}
}

func TestValidJSON(t *testing.T) {
	t.Parallel()
	got := ValidJSON([]byte("{\"a\":\"\xff\"}"))
	require.True(t, json.Valid(got))
	require.JSONEq(t, `{"a":"\ufffd"}`, string(got))
	_, err := Find(got)
	require.NoError(t, err)
}

// FuzzFind: Find never panics, and on a valid document it agrees with what
// encoding/json makes of it: a document Find passes holds no NUL once
// decoded and is UTF-8 once re-encoded.
func FuzzFind(f *testing.F) {
	for _, s := range []string{`{"a":"b"}`, `"\u0000"`, "\"\xff\"", `[1,{"k":"\ud800"}]`, `{"a":[[],{}]}`, `"\\u0000"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		path, err := Find(b)
		if !json.Valid(b) {
			return
		}
		if err == nil {
			require.True(t, utf8.Valid(b), "Find passed bytes that are not UTF-8")
			require.Empty(t, path)
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			var v any
			require.NoError(t, dec.Decode(&v))
			require.False(t, holdsNUL(v), "Find passed a NUL")
		}
		fixed := ValidJSON(b)
		require.True(t, json.Valid(fixed))
		require.True(t, utf8.Valid(fixed))
	})
}

func holdsNUL(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.IndexByte(x, 0) >= 0
	case []any:
		for _, e := range x {
			if holdsNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if strings.IndexByte(k, 0) >= 0 || holdsNUL(e) {
				return true
			}
		}
	}
	return false
}
