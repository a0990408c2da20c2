package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
)

// This file writes the rows of the store's bulk inserts with COPY in
// PostgreSQL's binary format, encoded here: their values are of four kinds
// (int64, string, and pointers to them, nil for NULL), into columns of six
// types (bigint, integer, text, varchar, json, jsonb), which a type switch
// encodes. pgx's CopyFrom encodes any value into any type, planning each
// value's encoding through its type map: for the 45 values of a one-step
// task that cost a fifth of the engine's CPU in a bulk submission (the
// bench's submit scenario, 100,000 tasks: 17.4 to 19.4 us of the bench
// process's CPU a task before, 14.1 to 14.6 after). A row with any other
// kind of value, or a column of another type, goes through pgx's CopyFrom.

// copyHeader starts a COPY in binary format: the signature, no flags, no
// header extension.
var copyHeader = []byte("PGCOPY\n\377\r\n\000\000\000\000\000\000\000\000\000")

// copyChunk is about how many bytes of encoded rows a read yields.
const copyChunk = 64 << 10

// copyRows writes rows into table's columns on conn with COPY.
func copyRows(ctx context.Context, conn *pgx.Conn, table string, columns []string, rows sqldb.CopySource) (int64, error) {
	quoted := make([]string, len(columns))
	for i, c := range columns {
		quoted[i] = pgx.Identifier{c}.Sanitize()
	}
	cols := strings.Join(quoted, ", ")
	name := pgx.Identifier{table}.Sanitize()
	// The columns' types, described once per connection (pgx keeps the
	// description of a named statement).
	probe := "SELECT " + cols + " FROM " + name
	sd, err := conn.Prepare(ctx, probe, probe)
	if err != nil {
		return 0, fmt.Errorf("describe the columns of %s: %w", table, err)
	}
	oids := make([]uint32, len(sd.Fields))
	for i, f := range sd.Fields {
		oids[i] = f.DataTypeOID
	}
	r := &copyReader{oids: oids, rows: rows, buf: append(make([]byte, 0, copyChunk+4096), copyHeader...)}
	if r.next(); r.err != nil || r.row == nil {
		return 0, r.err
	}
	if err := r.encode(r.row); errors.Is(err, errUnencodable) {
		// A kind of value or a column type encoded here by no one: pgx's.
		return conn.CopyFrom(ctx, pgx.Identifier{table}, columns, &peeked{first: r.row, rest: rows})
	} else if err != nil {
		return 0, err
	}
	r.next()
	tag, err := conn.PgConn().CopyFrom(ctx, r, "COPY "+name+" ("+cols+") FROM STDIN BINARY")
	if r.err != nil {
		return 0, r.err
	}
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// errUnencodable: a value of a kind the store's COPY does not encode, or
// one its column's type does not take.
var errUnencodable = errors.New("copy: a row's values do not match its columns' types")

// copyReader yields the binary COPY data of its rows, encoding them as
// they are read.
type copyReader struct {
	oids []uint32
	rows sqldb.CopySource
	row  []any // the next row to encode; nil once none is left
	buf  []byte
	off  int
	done bool
	err  error // a row that could not be encoded, or the source's error
}

func (r *copyReader) Read(p []byte) (int, error) {
	for len(r.buf)-r.off < len(p) && !r.done {
		r.fill()
	}
	if r.err != nil {
		return 0, r.err
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	if n == 0 && r.done {
		return 0, io.EOF
	}
	return n, nil
}

// fill encodes rows until about copyChunk bytes wait to be read, or ends
// the data.
func (r *copyReader) fill() {
	if r.off > 0 {
		r.buf = r.buf[:copy(r.buf, r.buf[r.off:])]
		r.off = 0
	}
	for len(r.buf) < copyChunk && !r.done {
		if r.row == nil {
			r.buf = binary.BigEndian.AppendUint16(r.buf, math.MaxUint16) // the trailer: -1
			r.done = true
			return
		}
		if err := r.encode(r.row); err != nil {
			r.err, r.done = err, true
			return
		}
		r.next()
	}
}

// next reads the source's next row into row: nil once none is left; err,
// ending the data, where the source failed.
func (r *copyReader) next() {
	r.row = nil
	if r.rows.Next() {
		row, err := r.rows.Values()
		if err != nil {
			r.err, r.done = err, true
			return
		}
		r.row = row
	} else if err := r.rows.Err(); err != nil {
		r.err, r.done = err, true
	}
}

// encode appends one row: errUnencodable where a value is of a kind, or
// its column of a type, that it does not encode.
func (r *copyReader) encode(row []any) error {
	if len(row) != len(r.oids) {
		return errUnencodable
	}
	r.buf = binary.BigEndian.AppendUint16(r.buf, uint16(len(row)))
	for i, v := range row {
		var err error
		switch v := v.(type) {
		case nil:
			r.null()
		case *int64:
			if v == nil {
				r.null()
				continue
			}
			err = r.int(r.oids[i], *v)
		case int64:
			err = r.int(r.oids[i], v)
		case *string:
			if v == nil {
				r.null()
				continue
			}
			err = r.text(r.oids[i], *v)
		case string:
			err = r.text(r.oids[i], v)
		default:
			err = errUnencodable
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *copyReader) null() { r.buf = binary.BigEndian.AppendUint32(r.buf, math.MaxUint32) } // length -1

func (r *copyReader) int(oid uint32, v int64) error {
	switch oid {
	case pgtype.Int8OID:
		r.buf = binary.BigEndian.AppendUint32(r.buf, 8)
		r.buf = binary.BigEndian.AppendUint64(r.buf, uint64(v))
	case pgtype.Int4OID:
		if v < math.MinInt32 || v > math.MaxInt32 {
			return fmt.Errorf("copy: %d does not fit an integer column", v)
		}
		r.buf = binary.BigEndian.AppendUint32(r.buf, 4)
		r.buf = binary.BigEndian.AppendUint32(r.buf, uint32(int32(v)))
	default:
		return errUnencodable
	}
	return nil
}

func (r *copyReader) text(oid uint32, s string) error {
	switch oid {
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.JSONOID:
		r.buf = binary.BigEndian.AppendUint32(r.buf, uint32(len(s)))
	case pgtype.JSONBOID:
		// jsonb's binary form: its version, 1, then the text.
		r.buf = binary.BigEndian.AppendUint32(r.buf, uint32(len(s)+1))
		r.buf = append(r.buf, 1)
	default:
		return errUnencodable
	}
	r.buf = append(r.buf, s...)
	return nil
}

// peeked is a CopySource whose first row was read already.
type peeked struct {
	first   []any
	rest    sqldb.CopySource
	started bool
}

func (p *peeked) Next() bool {
	if !p.started {
		p.started = true
		return true
	}
	return p.rest.Next()
}

func (p *peeked) Values() ([]any, error) {
	if p.first != nil {
		v := p.first
		p.first = nil
		return v, nil
	}
	return p.rest.Values()
}

func (p *peeked) Err() error { return p.rest.Err() }
