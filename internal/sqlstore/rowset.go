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
// names that do not collide with the joined table's). It returns the FROM
// item and its arguments.
func (t *txn) rowset(alias string, cols []column, rows [][]any) (string, []any) {
	if t.s.d.Arrays {
		args := make([]any, len(cols))
		types := make([]string, len(cols))
		names := make([]string, len(cols))
		for c, col := range cols {
			names[c] = col.name
			switch col.typ {
			case colInt:
				v := make([]int64, len(rows))
				for r := range rows {
					v[r] = rows[r][c].(int64)
				}
				args[c], types[c] = v, "?::bigint[]"
			case colText:
				v := make([]string, len(rows))
				for r := range rows {
					v[r] = rows[r][c].(string)
				}
				args[c], types[c] = v, "?::text[]"
			case colJSON:
				v := make([]*string, len(rows))
				for r := range rows {
					if raw := rows[r][c].(json.RawMessage); raw != nil {
						s := string(raw)
						v[r] = &s
					}
				}
				args[c], types[c] = v, "?::text[]"
			}
		}
		return fmt.Sprintf("unnest(%s) AS %s(%s)", strings.Join(types, ", "), alias, strings.Join(names, ", ")), args
	}
	// One JSON array per row; JSON results travel as strings so that they
	// come back as the same text.
	doc := make([][]any, len(rows))
	for r, row := range rows {
		doc[r] = make([]any, len(cols))
		for c, col := range cols {
			v := row[c]
			if col.typ == colJSON {
				if raw := v.(json.RawMessage); raw != nil {
					v = string(raw)
				} else {
					v = nil
				}
			}
			doc[r][c] = v
		}
	}
	b, _ := json.Marshal(doc) // ints, strings and nils always encode
	sel := make([]string, len(cols))
	for c, col := range cols {
		sel[c] = fmt.Sprintf("j.value ->> %d AS %s", c, col.name)
	}
	return fmt.Sprintf("(SELECT %s FROM json_each(?) AS j) AS %s", strings.Join(sel, ", "), alias), []any{string(b)}
}
