package sqltx

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// cell is a row of the rowset tests: one column of each type.
type cell struct {
	n int64
	s string
	j json.RawMessage
}

var cellCols = []col[cell]{
	IntCol("n", func(c *cell) int64 { return c.n }),
	TextCol("s", func(c *cell) string { return c.s }),
	JSONCol("j", func(c *cell) json.RawMessage { return c.j }),
}

func TestSameColumns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rows []cell
		want []bool
	}{
		{"one row varies", []cell{{1, "a", json.RawMessage(`1`)}}, []bool{false, false, false}},
		{"no rows", nil, []bool{false, false, false}},
		{"constant columns travel once", []cell{{1, "a", nil}, {2, "a", nil}}, []bool{false, true, true}},
		{"NULL differs from JSON", []cell{{1, "a", nil}, {1, "b", json.RawMessage(`null`)}}, []bool{true, false, false}},
		{"JSON compares by text", []cell{{1, "a", json.RawMessage(`{"x":1}`)}, {2, "a", json.RawMessage(`{"x":2}`)}}, []bool{false, true, false}},
		{"one column left to vary", []cell{{1, "a", json.RawMessage(`1`)}, {1, "a", json.RawMessage(`1`)}}, []bool{false, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, sameColumns(tc.rows, cellCols))
		})
	}
}

// TestRowsetDocument: on SQLite a rowset is one JSON document, written
// value by value; every value must read back as it was, whatever its bytes.
func TestRowsetDocument(t *testing.T) {
	t.Parallel()
	rows := []cell{
		{-1 << 62, "quote \" backslash \\ newline \n tab \t nul \x00", json.RawMessage(`{"a":"<b>&"}`)},
		{0, "", nil},
		{42, "ünïcödé ☃ <html> & \u2028", json.RawMessage(`"s"`)},
		{7, "bad utf-8 \xff\xfe", json.RawMessage(`[1,2]`)},
	}
	tx := &Tx{H: &Handle{Dialect: oneWriter{}}} // no arrays: the SQLite form
	from, args := Rowset(tx, "x", rows, cellCols...)
	require.Contains(t, from, "jsonb_each(?)")
	require.Len(t, args, 1)
	var doc [][]any
	require.NoError(t, json.Unmarshal([]byte(args[0].(string)), &doc))
	require.Len(t, doc, len(rows))
	for i, r := range rows {
		want := []any{float64(r.n), string([]rune(r.s)), nil}
		if r.j != nil {
			want[2] = string(r.j)
		}
		if i == 0 {
			want[0] = doc[0][0] // beyond float64's precision: checked as text below
		}
		require.Equal(t, want, doc[i], "row %d", i)
	}
	require.Contains(t, args[0].(string), "[-4611686018427387904,")
}

// BenchmarkRowsetAudit: the rowset of a completion's folded audit rows in
// fanout5's shape (every task's four other steps folded onto its first's
// row: the same list on every row), on SQLite's document.
func BenchmarkRowsetAudit(b *testing.B) {
	rows := make([]auditRow, 200)
	for i := range rows {
		rows[i] = auditRow{taskID: int64(i + 1), step: "a", from: "running", to: "completed", Attempt: 1, engine: "e1",
			taskFrom: "running", taskTo: "completed", steps: []string{"b", "completed", "c", "completed", "d", "completed", "e", "completed"}}
	}
	tx := &Tx{H: &Handle{Dialect: oneWriter{}}}
	for b.Loop() {
		Rowset(tx, "u", rows, auditRowset...)
	}
}

// TestAppendJSONString: every string is written byte for byte as
// encoding/json's Encoder writes it without escaping HTML, invalid UTF-8
// included.
func TestAppendJSONString(t *testing.T) {
	t.Parallel()
	for _, s := range jsonStringSeeds {
		t.Run(fmt.Sprintf("%q", s), func(t *testing.T) {
			t.Parallel()
			checkJSONString(t, s)
		})
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range jsonStringSeeds {
		f.Add(s)
	}
	f.Fuzz(checkJSONString)
}

var jsonStringSeeds = []string{"", "plain", `"quoted"`, `back\slash`, "tab\there", "line\nbreak\r\n", "nul\x00byte", "\x1f\x7f",
	"<html> & 'apostrophes'", "naïve café 漢字 🎉", "\u2028\u2029", "bad \xff utf-8 \xc3", "\xed\xa0\x80 surrogate", "'; DROP TABLE steps; --"}

func checkJSONString(t *testing.T, s string) {
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(s))
	got := appendJSONString([]byte("x"), s)
	require.Equal(t, "x"+strings.TrimSuffix(want.String(), "\n"), string(got))
}

// oneWriter is the Dialect of a database with none of PostgreSQL's
// features, as SQLite's is: what the tests here ask of a dialect.
type oneWriter struct{ Dialect }

func (oneWriter) Arrays() bool { return false }
