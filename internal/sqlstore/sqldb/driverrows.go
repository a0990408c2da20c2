package sqldb

import (
	"bytes"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"time"
)

// This file holds what database/sql would do for the held writer
// (heldconn.go): arguments to the driver's values, and the driver's values
// into the store's scan destinations, as database/sql converts them.

// namedValues converts a statement's arguments to the driver's values,
// appended to dst[:0].
func namedValues(dst []driver.NamedValue, args []any) ([]driver.NamedValue, error) {
	nv := dst[:0]
	for i, a := range args {
		v, err := driverValue(a)
		if err != nil {
			return nil, fmt.Errorf("argument %d: %w", i+1, err)
		}
		nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: v})
	}
	return nv, nil
}

// driverValue is a as a driver value: the types the store passes most,
// directly; the others as database/sql converts them.
func driverValue(a any) (driver.Value, error) {
	switch v := a.(type) {
	case nil, int64, string, float64, bool, []byte, time.Time:
		return v, nil
	case int:
		return int64(v), nil
	case json.RawMessage:
		if v == nil {
			return nil, nil
		}
		return []byte(v), nil
	}
	return driver.DefaultParameterConverter.ConvertValue(a)
}

// driverRows is the Rows of a query on the held writer.
type driverRows struct {
	rows   driver.Rows
	vals   []driver.Value
	err    error
	closed bool
}

func newDriverRows(rows driver.Rows) *driverRows {
	return &driverRows{rows: rows, vals: make([]driver.Value, len(rows.Columns()))}
}

func (r *driverRows) Next() bool {
	if r.closed {
		return false
	}
	if err := r.rows.Next(r.vals); err != nil {
		if !errors.Is(err, io.EOF) {
			r.err = err
		}
		r.Close()
		return false
	}
	return true
}

func (r *driverRows) Scan(dest ...any) error {
	if r.closed {
		return errors.New("sql: Rows are closed")
	}
	if len(dest) != len(r.vals) {
		return fmt.Errorf("sql: expected %d destination arguments in Scan, not %d", len(r.vals), len(dest))
	}
	for i, d := range dest {
		if err := assign(d, r.vals[i]); err != nil {
			return fmt.Errorf("sql: Scan error on column index %d: %w", i, err)
		}
	}
	return nil
}

func (r *driverRows) Err() error { return r.err }

func (r *driverRows) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	return r.rows.Close()
}

// driverRow is the Row of a one-row query on the held writer.
type driverRow struct{ rows Rows }

func (r *driverRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	return r.rows.Scan(dest...)
}

// assign stores a driver value in a scan destination, as database/sql's
// Rows.Scan would: sql.Scanner destinations scan it themselves; NULL goes
// only where a destination can hold it; bytes are copied.
func assign(dest any, src driver.Value) error {
	switch d := dest.(type) {
	case sql.Scanner:
		return d.Scan(src)
	case *any:
		if b, ok := src.([]byte); ok {
			src = bytes.Clone(b)
		}
		*d = src
		return nil
	case *int64:
		if v, ok := src.(int64); ok {
			*d = v
			return nil
		}
	case *string:
		if v, ok := src.(string); ok {
			*d = v
			return nil
		}
	case *[]byte:
		if b, ok := bytesOf(src); ok {
			*d = b
			return nil
		}
	case *json.RawMessage:
		if b, ok := bytesOf(src); ok {
			*d = b
			return nil
		}
	}
	// The rest (a number into a string, a named string type, an int into
	// a float or a bool) goes through the value's text.
	return assignReflect(dest, src)
}

// bytesOf is src as bytes of the destination's own: NULL as nil.
func bytesOf(src driver.Value) ([]byte, bool) {
	switch v := src.(type) {
	case nil:
		return nil, true
	case []byte:
		return bytes.Clone(v), true
	case string:
		return []byte(v), true
	}
	return nil, false
}

// assignReflect stores src in a pointer to a type of a basic kind (an
// int, a float, a bool, a string, a named string type), converting through
// its text as database/sql does: the rarer destinations.
func assignReflect(dest any, src driver.Value) error {
	dv := reflect.ValueOf(dest)
	if dv.Kind() != reflect.Pointer || dv.IsNil() {
		return fmt.Errorf("destination not a pointer: %T", dest)
	}
	e := dv.Elem()
	if src == nil {
		return fmt.Errorf("converting NULL to %s is unsupported", e.Kind())
	}
	text, ok := asText(src)
	if !ok {
		return fmt.Errorf("unsupported Scan, storing driver.Value type %T into type %T", src, dest)
	}
	var err error
	switch e.Kind() {
	case reflect.String:
		e.SetString(text)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var n int64
		if n, err = strconv.ParseInt(text, 10, e.Type().Bits()); err == nil {
			e.SetInt(n)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		var n uint64
		if n, err = strconv.ParseUint(text, 10, e.Type().Bits()); err == nil {
			e.SetUint(n)
		}
	case reflect.Float32, reflect.Float64:
		var f float64
		if f, err = strconv.ParseFloat(text, e.Type().Bits()); err == nil {
			e.SetFloat(f)
		}
	case reflect.Bool:
		var b bool
		if b, err = strconv.ParseBool(text); err == nil {
			e.SetBool(b)
		}
	default:
		return fmt.Errorf("unsupported Scan, storing driver.Value type %T into type %T", src, dest)
	}
	if err != nil {
		return fmt.Errorf("converting driver.Value type %T (%q) to a %s: %w", src, text, e.Kind(), err)
	}
	return nil
}

// asText is a driver value's text, as database/sql reads it for a
// destination of another type.
func asText(src driver.Value) (string, bool) {
	switch v := src.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), true
	case bool:
		return strconv.FormatBool(v), true
	}
	return "", false
}
