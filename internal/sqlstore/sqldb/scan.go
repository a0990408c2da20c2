package sqldb

// Collect reads every row of rows with scan, in order, and closes rows,
// checking the iteration's error, in the spirit of pgx.CollectRows. Scan
// functions take a Row, so the same one reads a QueryRow's single row.
func Collect[T any](rows Rows, scan func(Row) (T, error)) ([]T, error) {
	return CollectSized(rows, 0, scan)
}

// CollectSized is Collect with room for n rows made ahead.
func CollectSized[T any](rows Rows, n int, scan func(Row) (T, error)) ([]T, error) {
	var out []T
	if n > 0 {
		out = make([]T, 0, n)
	}
	err := Each(rows, func(r Row) error {
		v, err := scan(r)
		if err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Each calls fn with every row of rows, in order, until fn fails, then
// closes rows, checking the iteration's error: the one walk of a query's
// rows (Collect records them).
func Each(rows Rows, fn func(Row) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Int64 reads a row of one integer column.
func Int64(r Row) (int64, error) {
	var v int64
	err := r.Scan(&v)
	return v, err
}

// String reads a row of one text column.
func String(r Row) (string, error) {
	var v string
	err := r.Scan(&v)
	return v, err
}
