package sqltx

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// colType is the SQL type of a rowset column.
type colType int

const (
	ColInt  colType = iota // bigint; Go int64
	colText                // text; Go string
	colJSON                // text that may be NULL; Go json.RawMessage, nil for NULL
)

// col is one column of a rowset of rows of type R: its name, its type and
// how to read it from a row (the reader of its type).
type col[R any] struct {
	name string
	typ  colType
	int  func(*R) int64
	text func(*R) string
	json func(*R) json.RawMessage
}

func IntCol[R any](name string, f func(*R) int64) col[R] {
	return col[R]{name: name, typ: ColInt, int: f}
}

func TextCol[R any](name string, f func(*R) string) col[R] {
	return col[R]{name: name, typ: colText, text: f}
}

func JSONCol[R any](name string, f func(*R) json.RawMessage) col[R] {
	return col[R]{name: name, typ: colJSON, json: f}
}

// Rowset turns rows into a relation a statement can join, so that one
// statement updates many rows however many there are: unnest of one array
// per column on PostgreSQL, jsonb_each of one JSON document on SQLite
// (whose rows stay SQLite's binary JSON; json_each gives each row back as
// text, parsed again for each of its columns read: the audit rows' insert
// took a fifth longer).
// Values are read from the rows by each column's reader, into one array
// per column, never one Go value per cell: a busy engine's rowsets carry
// thousands of cells a second. alias names the relation; its columns are
// named as given (choose names that do not collide with the joined
// table's). A column with the same value in every row travels once, as a
// parameter of its own (the engine and the states of a batch's audit rows,
// say). It returns the FROM item and its arguments.
func Rowset[R any](t *Tx, alias string, rows []R, cols ...col[R]) (string, []any) {
	same := sameColumns(rows, cols)
	var consts []string
	var constArgs []any
	for c, col := range cols {
		if same[c] {
			consts = append(consts, fmt.Sprintf(", %s AS %s", t.Scalar(col.typ), col.name))
			constArgs = append(constArgs, col.param(&rows[0]))
		}
	}
	if t.H.Dialect.Arrays() {
		var args []any
		var types, names []string
		for c, col := range cols {
			if same[c] {
				continue
			}
			names = append(names, col.name)
			switch col.typ {
			case ColInt:
				v := make([]int64, len(rows))
				for r := range rows {
					v[r] = col.int(&rows[r])
				}
				args, types = append(args, v), append(types, "?::bigint[]")
			case colText:
				v := make([]string, len(rows))
				for r := range rows {
					v[r] = col.text(&rows[r])
				}
				args, types = append(args, v), append(types, "?::text[]")
			case colJSON:
				v := make([]*string, len(rows))
				for r := range rows {
					if raw := col.json(&rows[r]); raw != nil {
						s := string(raw)
						v[r] = &s
					}
				}
				args, types = append(args, v), append(types, "?::text[]")
			}
		}
		from := fmt.Sprintf("unnest(%s) AS %s(%s)", strings.Join(types, ", "), alias, strings.Join(names, ", "))
		if len(consts) == 0 {
			return from, args
		}
		return fmt.Sprintf("(SELECT %s.*%s FROM %s) AS %s", alias, strings.Join(consts, ""), from, alias), append(constArgs, args...)
	}
	// One JSON array per row of the columns that vary; JSON results travel
	// as strings so that they come back as the same text.
	var doc bytes.Buffer
	text := func(s string) { doc.Write(appendJSONString(doc.AvailableBuffer(), s)) }
	doc.WriteByte('[')
	for r := range rows {
		if r > 0 {
			doc.WriteByte(',')
		}
		doc.WriteByte('[')
		first := true
		for c, col := range cols {
			if same[c] {
				continue
			}
			if !first {
				doc.WriteByte(',')
			}
			first = false
			switch col.typ {
			case ColInt:
				doc.Write(strconv.AppendInt(doc.AvailableBuffer(), col.int(&rows[r]), 10))
			case colText:
				text(col.text(&rows[r]))
			case colJSON:
				if raw := col.json(&rows[r]); raw != nil {
					text(string(raw))
				} else {
					doc.WriteString("null")
				}
			}
		}
		doc.WriteByte(']')
		if r == 0 && len(rows) > 1 {
			// Room for the rest, sized by the first row: the document
			// grown by doubling cost twice its size in garbage.
			doc.Grow(doc.Len() * (len(rows) - 1) * 5 / 4)
		}
	}
	doc.WriteByte(']')
	var sel []string
	for c, col := range cols {
		if !same[c] {
			sel = append(sel, fmt.Sprintf("j.value ->> %d AS %s", len(sel), col.name))
		}
	}
	return fmt.Sprintf("(SELECT %s%s FROM jsonb_each(?) AS j) AS %s", strings.Join(sel, ", "), strings.Join(consts, ""), alias),
		append(constArgs, doc.String())
}

// ByParams reports whether n rows go as parameters instead of a rowset: on
// SQLite, one row (an idle engine's batch, each level of a DAG), where a
// JSON document of one row cost more to read than the row's write: an
// UPDATE by parameters 33 against 43 to 58 µs, an INSERT … SELECT from a
// row of parameters (paramRow) 7.5 against 26 µs. In an UPDATE … FROM
// SQLite materializes a row of parameters (120 µs), so updates of one row
// are plain UPDATEs. PostgreSQL keeps its arrays, one plan a shape.
func (t *Tx) ByParams(n int) bool { return n == 1 && !t.H.Dialect.Arrays() }

// paramRow is one row as a relation of its values as parameters, for an
// INSERT … SELECT of a row that goes by parameters (ByParams). It returns
// the FROM item and its arguments, as rowset does.
func paramRow[R any](alias string, row *R, cols ...col[R]) (string, []any) {
	sel, args := make([]string, len(cols)), make([]any, len(cols))
	for c, col := range cols {
		sel[c], args[c] = "? AS "+col.name, col.param(row)
	}
	return fmt.Sprintf("(SELECT %s) AS %s", strings.Join(sel, ", "), alias), args
}

// Scalar is the placeholder of one value of a rowset column.
func (t *Tx) Scalar(typ colType) string {
	if !t.H.Dialect.Arrays() {
		return "?"
	}
	if typ == ColInt {
		return "?::bigint"
	}
	return "?::text"
}

// param is c's value in row r as a parameter: JSON as its text, or nil for
// NULL.
func (c col[R]) param(r *R) any {
	switch c.typ {
	case ColInt:
		return c.int(r)
	case colText:
		return c.text(r)
	}
	if raw := c.json(r); raw != nil {
		return string(raw)
	}
	return nil
}

// same reports whether every row holds the first row's value in c,
// reading that value once (a column's reader may build it: an audit row's
// list of steps is marshalled).
func (c col[R]) same(rows []R) bool {
	switch c.typ {
	case ColInt:
		return allSame(rows, c.int)
	case colText:
		return allSame(rows, c.text)
	}
	// JSON compared as text without a copy, NULL apart from "".
	v := c.json(&rows[0])
	for r := 1; r < len(rows); r++ {
		if w := c.json(&rows[r]); (w == nil) != (v == nil) || string(w) != string(v) {
			return false
		}
	}
	return true
}

// allSame reports whether value gives every row the first row's value,
// reading each row's once.
func allSame[R any, V comparable](rows []R, value func(*R) V) bool {
	first := value(&rows[0])
	for r := 1; r < len(rows); r++ {
		if value(&rows[r]) != first {
			return false
		}
	}
	return true
}

// sameColumns reports, for each column, whether every one of two rows or
// more holds the same value in it. One column at least is left to vary:
// the relation has as many rows as its arrays.
func sameColumns[R any](rows []R, cols []col[R]) []bool {
	same := make([]bool, len(cols))
	if len(rows) < 2 {
		return same
	}
	varying := false
	for c, col := range cols {
		same[c] = col.same(rows)
		varying = varying || !same[c]
	}
	if !varying {
		same[0] = false
	}
	return same
}

// appendJSONString appends s to b as a JSON string, byte for byte as
// encoding/json's Encoder writes one with SetEscapeHTML(false): invalid
// UTF-8 as U+FFFD; quotes, backslashes, control characters, U+2028 and
// U+2029 escaped. The Encoder, which the rowsets used, and json.Marshal,
// which wrote the audit rows' lists of steps, went through reflection for
// every string: half the time of an audit rowset.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
