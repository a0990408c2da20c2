package sqlstore

import (
	"encoding/json"
	"fmt"
	"strings"
)

// colType is the SQL type of a rowset column.
type colType int

const (
	colInt  colType = iota // bigint; Go int64
	colText                // text; Go string
	colJSON                // text that may be NULL; Go json.RawMessage, nil for NULL
)

// column is one column of a rowset.
type column struct {
	name string
	typ  colType
}

// rowset turns rows of Go values into a relation a statement can join, so
// that one statement updates many rows however many there are: unnest of
// one array per column on PostgreSQL, json_each of one JSON document on
// SQLite. alias names the relation; its columns are named as given (choose
// names that do not collide with the joined table's). A column with the
// same value in every row travels once, as a parameter of its own (the
// engine and the states of a batch's audit rows, say). It returns the FROM
// item and its arguments.
func (t *txn) rowset(alias string, cols []column, rows [][]any) (string, []any) {
	same := sameColumns(cols, rows)
	var consts []string
	var constArgs []any
	for c, col := range cols {
		if same[c] {
			consts = append(consts, fmt.Sprintf(", %s AS %s", t.scalar(col.typ), col.name))
			constArgs = append(constArgs, value(col.typ, rows[0][c]))
		}
	}
	if t.s.d.Arrays {
		var args []any
		var types, names []string
		for c, col := range cols {
			if same[c] {
				continue
			}
			names = append(names, col.name)
			switch col.typ {
			case colInt:
				v := make([]int64, len(rows))
				for r := range rows {
					v[r] = rows[r][c].(int64)
				}
				args, types = append(args, v), append(types, "?::bigint[]")
			case colText:
				v := make([]string, len(rows))
				for r := range rows {
					v[r] = rows[r][c].(string)
				}
				args, types = append(args, v), append(types, "?::text[]")
			case colJSON:
				v := make([]*string, len(rows))
				for r := range rows {
					if raw := rows[r][c].(json.RawMessage); raw != nil {
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
	doc := make([][]any, len(rows))
	for r, row := range rows {
		doc[r] = make([]any, 0, len(cols)-len(consts))
		for c, col := range cols {
			if !same[c] {
				doc[r] = append(doc[r], value(col.typ, row[c]))
			}
		}
	}
	b, _ := json.Marshal(doc) // ints, strings and nils always encode
	var sel []string
	for c, col := range cols {
		if !same[c] {
			sel = append(sel, fmt.Sprintf("j.value ->> %d AS %s", len(sel), col.name))
		}
	}
	return fmt.Sprintf("(SELECT %s%s FROM json_each(?) AS j) AS %s", strings.Join(sel, ", "), strings.Join(consts, ""), alias),
		append(constArgs, string(b))
}

// scalar is the placeholder of one value of a rowset column.
func (t *txn) scalar(typ colType) string {
	if !t.s.d.Arrays {
		return "?"
	}
	if typ == colInt {
		return "?::bigint"
	}
	return "?::text"
}

// value is a rowset value as a parameter: JSON as its text, or nil for
// NULL.
func value(typ colType, v any) any {
	if typ != colJSON {
		return v
	}
	if raw := v.(json.RawMessage); raw != nil {
		return string(raw)
	}
	return nil
}

// sameColumns reports, for each column, whether every one of two rows or
// more holds the same value in it. One column at least is left to vary:
// the relation has as many rows as its arrays.
func sameColumns(cols []column, rows [][]any) []bool {
	same := make([]bool, len(cols))
	if len(rows) < 2 {
		return same
	}
	varying := false
	for c, col := range cols {
		same[c] = true
		for _, row := range rows[1:] {
			if !equalValue(col.typ, row[c], rows[0][c]) {
				same[c], varying = false, true
				break
			}
		}
	}
	if !varying {
		same[0] = false
	}
	return same
}

func equalValue(typ colType, a, b any) bool {
	if typ == colJSON {
		x, y := a.(json.RawMessage), b.(json.RawMessage)
		return (x == nil) == (y == nil) && string(x) == string(y)
	}
	return a == b
}
