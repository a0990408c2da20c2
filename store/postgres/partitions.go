package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weftrun/weft/store"
)

// This file keeps the audit trail in time partitions (migration 033): the
// maintenance leader creates them ahead of the database's clock and drops
// those past the longest retention, once the rows of tasks still kept have
// moved to audit_kept.

var _ store.HistoryRoller = Store{}

const (
	// partitionPrefix and partitionTime name a time partition by its
	// bounds, in UTC: audit_p20261207t060000_20261207t070000.
	partitionPrefix = "audit_p"
	partitionTime   = "20060102t150405"
	// partitionsAhead is how many spans past the clock are covered.
	partitionsAhead = 2
	// moveBatch is how many tasks one transaction of a drop looks at.
	moveBatch = 5000
	// partitionLockWait bounds how long a partition's creation or drop
	// waits for the locks it takes, which writers to the audit trail
	// queue behind: a busy moment is left for the next round.
	partitionLockWait = "1s"
	// partitionLock serializes the rolls of several processes on one
	// schema.
	partitionLock = `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '/audit partitions'))`
)

// historySpan is how much time a partition made for a retention window
// covers: a quarter of the window, from five minutes to a day, so that a
// window spans about four partitions, and a long one a partition a day.
func historySpan(window time.Duration) time.Duration {
	return min(max(window/4, 5*time.Minute), 24*time.Hour).Truncate(time.Minute)
}

// partition is a time partition of the audit trail: rows written from lo
// up to hi.
type partition struct {
	name   string
	lo, hi time.Time
}

func newPartition(lo, hi time.Time) partition {
	return partition{name: partitionPrefix + lo.UTC().Format(partitionTime) + "_" + hi.UTC().Format(partitionTime), lo: lo, hi: hi}
}

// parsePartition reads a time partition's bounds from its name; ok is
// false for the other partitions (audit_kept, audit_default).
func parsePartition(name string) (p partition, ok bool) {
	lo, hi, ok := strings.Cut(strings.TrimPrefix(name, partitionPrefix), "_")
	if !ok || !strings.HasPrefix(name, partitionPrefix) {
		return p, false
	}
	var err1, err2 error
	p.name = name
	p.lo, err1 = time.Parse(partitionTime, lo)
	p.hi, err2 = time.Parse(partitionTime, hi)
	return p, err1 == nil && err2 == nil && p.lo.Before(p.hi)
}

// bound is a partition bound as SQL.
func bound(t time.Time) string { return "'" + t.UTC().Format(time.RFC3339) + "'" }

// RollHistory creates the time partitions of the audit trail ahead of the
// database's clock and drops each that ended more than window (plus a
// span, for retention's lag) ago, once the rows in it of tasks still
// there have moved to audit_kept.
func (s Store) RollHistory(ctx context.Context, window time.Duration) (store.HistoryRoll, error) {
	var roll store.HistoryRoll
	span := historySpan(window)
	now, parts, err := partitions(ctx, s.db)
	if err != nil {
		return roll, err
	}
	if roll.Created, err = createPartitions(ctx, s.db, span, now, parts); err != nil {
		return roll, err
	}
	for _, p := range parts {
		if p.hi.Add(window + span).After(now) {
			break
		}
		moved, err := moveKept(ctx, s.db, p)
		roll.Moved += moved
		if err != nil {
			return roll, err
		}
		if err := rollTx(ctx, s.db, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS `+p.name)
			return err
		}); err != nil {
			return roll, fmt.Errorf("drop history partition %s: %w", p.name, err)
		}
		roll.Dropped = append(roll.Dropped, p.name)
	}
	return roll, nil
}

// nextPartition is the partition that follows parts at now: from the end
// of the last one, or, where that is past (nothing rolled the history for
// a while: the rows since went to audit_default), from the span now is in.
func nextPartition(now time.Time, span time.Duration, parts []partition) partition {
	lo := now.Truncate(span)
	if n := len(parts); n > 0 && !parts[n-1].hi.Before(lo) {
		lo = parts[n-1].hi
	}
	hi := lo.Add(span).Truncate(span)
	if hi.Sub(lo) < span/2 {
		hi = hi.Add(span)
	}
	return newPartition(lo, hi)
}

// partitions reads the database's clock and the time partitions, oldest
// first, in one statement.
func partitions(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (time.Time, []partition, error) {
	var (
		now   time.Time
		names string
	)
	if err := q.QueryRowContext(ctx, `SELECT clock_timestamp(), coalesce((SELECT string_agg(c.relname, ' ')
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'audit'::regclass), '')`).Scan(&now, &names); err != nil {
		return now, nil, fmt.Errorf("list history partitions: %w", err)
	}
	var parts []partition
	for _, name := range strings.Fields(names) {
		if p, ok := parsePartition(name); ok {
			parts = append(parts, p)
		}
	}
	slices.SortFunc(parts, func(a, b partition) int { return a.lo.Compare(b.lo) })
	return now, parts, nil
}

// missing reports whether the partitions parts leave some of the clock now
// and the partitionsAhead spans after it uncovered, and which is next.
func missing(now time.Time, span time.Duration, parts []partition) (partition, bool) {
	p := nextPartition(now, span, parts)
	return p, p.lo.Before(now.Add(partitionsAhead * span))
}

// createPartitions creates the partitions from the end of the last one to
// partitionsAhead spans past the clock, in one transaction under the roll's
// lock, where the clock and partitions the caller read (now, seen) show
// one missing: a roll with none to make takes no lock. Rows of
// audit_default that a new partition covers (written while none did) move
// into it.
func createPartitions(ctx context.Context, db *sql.DB, span time.Duration, now time.Time, seen []partition) ([]string, error) {
	if _, ok := missing(now, span, seen); !ok {
		return nil, nil
	}
	var created []string
	err := rollTx(ctx, db, func(tx *sql.Tx) error {
		created = created[:0]
		// A partition attached under a weaker lock leaves a concurrent
		// write that routed its row to audit_default before the attach to
		// fail its check after it: writers wait for this transaction.
		if _, err := tx.ExecContext(ctx, `LOCK TABLE audit IN ACCESS EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("lock the audit trail: %w", err)
		}
		now, parts, err := partitions(ctx, tx)
		if err != nil {
			return err
		}
		for {
			p, ok := missing(now, span, parts)
			if !ok {
				return nil
			}
			for _, q := range []string{
				`CREATE TABLE ` + p.name + ` (LIKE audit INCLUDING DEFAULTS)`,
				`WITH m AS (DELETE FROM audit_default WHERE part >= ` + bound(p.lo) + ` AND part < ` + bound(p.hi) + ` RETURNING *)
					INSERT INTO ` + p.name + ` SELECT * FROM m`,
				`ALTER TABLE audit ATTACH PARTITION ` + p.name + ` FOR VALUES FROM (` + bound(p.lo) + `) TO (` + bound(p.hi) + `)`,
			} {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return fmt.Errorf("create history partition %s: %w", p.name, err)
				}
			}
			parts = append(parts, p)
			created = append(created, p.name)
		}
	})
	return created, err
}

// moveKept moves the rows of p whose task is still there to audit_kept, a
// batch of tasks a transaction, and returns how many it moved. A task is
// locked (FOR KEY SHARE) while its rows move, so that a delete of it either
// goes first (its rows stay, and go with p) or sees them moved (and
// deletes them there); in id order, as outcomes lock tasks, so that the
// two never deadlock.
func moveKept(ctx context.Context, db *sql.DB, p partition) (int64, error) {
	var total int64
	for after := int64(0); ; {
		var (
			last  sql.NullInt64
			moved int64
		)
		err := rollTx(ctx, db, func(tx *sql.Tx) error {
			return tx.QueryRowContext(ctx, `WITH batch AS (SELECT DISTINCT task_id FROM `+p.name+` WHERE task_id > $1 ORDER BY task_id LIMIT `+fmt.Sprint(moveBatch)+`),
				live AS (SELECT id FROM tasks WHERE id IN (SELECT task_id FROM batch) ORDER BY id FOR KEY SHARE),
				moved AS (UPDATE audit SET part = '-infinity' WHERE part >= `+bound(p.lo)+` AND part < `+bound(p.hi)+`
					AND task_id IN (SELECT id FROM live) RETURNING 1)
				SELECT (SELECT max(task_id) FROM batch), (SELECT count(*) FROM moved)`, after).Scan(&last, &moved)
		})
		if err != nil {
			return total, fmt.Errorf("move kept rows of history partition %s: %w", p.name, err)
		}
		total += moved
		if !last.Valid {
			return total, nil
		}
		after = last.Int64
	}
}

// rollTx runs fn in a transaction under the roll's lock, its waits for
// other locks bounded by partitionLockWait.
func rollTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return unavailable(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SET LOCAL lock_timeout = '`+partitionLockWait+`'`); err != nil {
		return unavailable(err)
	}
	if _, err := tx.ExecContext(ctx, partitionLock); err != nil {
		return unavailable(err)
	}
	if err := fn(tx); err != nil {
		return unavailable(err)
	}
	return unavailable(tx.Commit())
}
