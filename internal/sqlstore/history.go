package sqlstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// History reads the audit log in commit order (see Dialect.TxHistory).
// Cursors are "<id>" in id order and "<txid>.<id>" in (txid, id) order, the
// position after a row's first entry; a row's later entries (its task's
// transition or the steps that ride on it, foldAudit) have the
// cursor of the row with ".<n>" appended, n counting from 1, the position
// after that entry.
func (s *reads) History(ctx context.Context, q store.HistoryQuery) ([]store.HistoryEvent, error) {
	switch {
	case q.Limit == 0:
		q.Limit = 100
	case q.Limit < 0 || q.Limit > 1000:
		return nil, fmt.Errorf("history: limit %d: want 1 to 1000: %w", q.Limit, store.ErrInvalid)
	}
	c, err := s.parseCursor(q.After)
	if err != nil {
		return nil, err
	}
	// Within a row, the row is read again for the entries after the
	// cursor's.
	from := ">"
	if c.after < sqltx.EntriesPerRow-1 && c.id > 0 {
		from = ">="
	}
	var (
		where []string
		args  []any
	)
	if s.Dialect.TxHistory() {
		// Below the oldest running transaction the log no longer changes:
		// read only there, so that no row commits later before a cursor.
		where = append(where, `(a.txid, a.id) `+from+` (?::xid8, ?)`, `a.txid < pg_snapshot_xmin(pg_current_snapshot())`)
		args = append(args, strconv.FormatUint(c.txid, 10), c.id)
	} else {
		where = append(where, `a.id `+from+` ?`)
		args = append(args, c.id)
	}
	if q.Namespace != "" {
		where = append(where, `t.namespace = ?`)
		args = append(args, q.Namespace)
	}
	if q.Workflow != "" {
		ns, name, err := workflow.ParseFilter(q.Namespace, q.Workflow)
		if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		if ns != "" && q.Namespace == "" {
			where = append(where, `t.namespace = ?`)
			args = append(args, ns)
		}
		where = append(where, `t.workflow = ?`)
		args = append(args, name)
	}
	if q.Namespaces != nil {
		in, a := s.TextIn("t.namespace", q.Namespaces)
		where = append(where, in)
		args = append(args, a...)
	}
	if q.TaskID != 0 {
		where = append(where, `a.task_id = ?`)
		args = append(args, q.TaskID)
	}
	order, pos := `a.id`, `''`
	if s.Dialect.TxHistory() {
		order, pos = `a.txid, a.id`, `a.txid::text`
	}
	rows, err := s.Read(ctx, `SELECT `+sqltx.Qualify("a", sqltx.AuditColumns)+`, `+pos+`, t.namespace, t.workflow
		FROM audit a JOIN tasks t ON t.id = a.task_id
		WHERE `+strings.Join(where, " AND ")+`
		ORDER BY `+order+` LIMIT ?`, append(args, q.Limit+1)...) // the first row may be the cursor's, read again
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	type historyRow struct {
		sqltx.AuditRead
		tx, namespace, workflow string
	}
	read, err := sqldb.Collect(rows, func(r sqldb.Row) (historyRow, error) {
		var h historyRow
		a, err := sqltx.ScanAudit(r, &h.tx, &h.namespace, &h.workflow)
		if err != nil {
			return h, fmt.Errorf("scan history: %w", err)
		}
		h.AuditRead = a
		return h, nil
	})
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	events := make([]store.HistoryEvent, 0, len(read))
	for _, h := range read {
		cursor := strconv.FormatInt(h.Row, 10)
		if h.tx != "" {
			cursor = h.tx + "." + cursor
		}
		for i, e := range h.Entries {
			if h.Row == c.id && i <= c.after {
				continue // the cursor is after it
			}
			ev := store.HistoryEvent{Namespace: h.namespace, Workflow: h.namespace + "/" + h.workflow, AuditEntry: e,
				Type: store.EventType(e.Step, e.From, e.To), Cursor: cursor}
			if store.Preempted(e) {
				ev.Type = "step.preempted"
			}
			if i > 0 {
				ev.Cursor += "." + strconv.Itoa(i)
			}
			events = append(events, ev)
		}
	}
	if len(events) > q.Limit {
		events = events[:q.Limit]
	}
	if len(events) == 0 && q.CheckAfter && q.After != "" {
		// Nothing follows the cursor: is it beyond every event (a
		// transaction id not yet assigned; a row id not yet used, ids
		// never being reused)?
		past := `SELECT ? > coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'audit'), 0)`
		arg := any(c.id)
		if s.Dialect.TxHistory() {
			past, arg = `SELECT ?::xid8 > pg_snapshot_xmax(pg_current_snapshot())`, strconv.FormatUint(c.txid, 10)
		}
		var beyond bool
		if err := s.ReadRow(ctx, past, arg).Scan(&beyond); err != nil {
			return nil, fmt.Errorf("history: check cursor %q: %w", q.After, err)
		}
		if beyond {
			return nil, fmt.Errorf("history cursor %q: after the newest event of this database (restored or replaced since?): %w", q.After, store.ErrInvalid)
		}
	}
	return events, nil
}

// HistoryEnd returns a cursor after every event committed so far. In
// (txid, id) order it is the oldest running transaction's: the events of
// transactions that committed after it began, but before now, follow it.
func (s *reads) HistoryEnd(ctx context.Context) (string, error) {
	q := `SELECT coalesce(max(id), 0) || '.` + strconv.Itoa(sqltx.EntriesPerRow-1) + `' FROM audit`
	if s.Dialect.TxHistory() {
		q = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text || '.0'`
	}
	var end string
	if err := s.ReadRow(ctx, q).Scan(&end); err != nil {
		return "", fmt.Errorf("history end: %w", err)
	}
	return end, nil
}

// historyCursor is a parsed cursor: after entry after (from 0) of row id
// (of transaction txid in (txid, id) order); after EntriesPerRow-1 is
// after all of it.
type historyCursor struct {
	txid  uint64
	id    int64
	after int
}

// parseCursor reads a history cursor of this store's order; "" is the
// start.
func (s *reads) parseCursor(c string) (historyCursor, error) {
	var h historyCursor
	if c == "" {
		return h, nil
	}
	bad := fmt.Errorf("history cursor %q: not one this database handed out: %w", c, store.ErrInvalid)
	rest := c
	if s.Dialect.TxHistory() {
		tx, after, ok := strings.Cut(rest, ".")
		if !ok {
			return h, bad
		}
		var err error
		if h.txid, err = strconv.ParseUint(tx, 10, 64); err != nil || tx != strconv.FormatUint(h.txid, 10) {
			return h, bad
		}
		rest = after
	}
	idText, entry, ok := strings.Cut(rest, ".")
	if ok {
		n, err := strconv.Atoi(entry)
		if err != nil || n < 1 || n >= sqltx.EntriesPerRow || entry != strconv.Itoa(n) {
			return h, bad
		}
		h.after = n
	}
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil || id < 0 || idText != strconv.FormatInt(id, 10) {
		return h, bad // as handed out: digits alone, no sign, no leading zeros
	}
	h.id = id
	return h, nil
}
