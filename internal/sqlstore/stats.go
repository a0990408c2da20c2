package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// CountTasksByState counts tasks per state, at most limit each: one
// bounded count per state over the (state, id) index, in one statement.
func (s *reads) CountTasksByState(ctx context.Context, limit int, namespaces []string) ([]store.StateCount, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("count tasks by state: limit must be positive: %w", store.ErrInvalid)
	}
	parts := make([]string, len(state.Tasks))
	args := make([]any, 0, 3*len(state.Tasks))
	for i, st := range state.Tasks {
		in, nsArgs := "", []any(nil)
		if namespaces != nil {
			in, nsArgs = s.TextIn("namespace", namespaces)
			in = " AND " + in
		}
		parts[i] = fmt.Sprintf(`SELECT %d AS n, count(*) AS c FROM (SELECT 1 FROM tasks WHERE state = ?%s LIMIT ?) AS s%d`, i, in, i)
		args = append(append(append(args, string(st)), nsArgs...), limit)
	}
	rows, err := s.Read(ctx, strings.Join(parts, " UNION ALL ")+" ORDER BY n", args...)
	if err != nil {
		return nil, fmt.Errorf("count tasks by state: %w", err)
	}
	counts, err := sqldb.Collect(rows, func(r sqldb.Row) (store.StateCount, error) {
		var i, n int
		if err := r.Scan(&i, &n); err != nil {
			return store.StateCount{}, err
		}
		if i < 0 || i >= len(state.Tasks) {
			return store.StateCount{}, fmt.Errorf("state index %d out of range", i)
		}
		return store.StateCount{State: state.Tasks[i], Count: n}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("count tasks by state: %w", err)
	}
	return counts, nil
}

// TaskActivity groups the most recently finished tasks of a window by
// namespace and bucket, reading them from the finished_at index.
func (s *reads) TaskActivity(ctx context.Context, q store.ActivityQuery) (store.Activity, error) {
	if q.Bucket <= 0 || q.Since.IsZero() {
		return store.Activity{}, fmt.Errorf("task activity: a window start and a positive bucket are required: %w", store.ErrInvalid)
	}
	max := q.MaxTasks
	if max <= 0 {
		max = 100_000
	}
	since, bucket := q.Since.UnixMicro(), q.Bucket.Microseconds()
	if bucket < 1 {
		bucket = 1
	}
	in, nsArgs := "", []any(nil)
	if q.Namespaces != nil {
		in, nsArgs = s.TextIn("namespace", q.Namespaces)
		in = " AND " + in
	}
	rows, err := s.Read(ctx, `SELECT namespace, (finished_at - ?) / ? AS b, count(*),
		CAST(sum(CASE WHEN state IN ('failed', 'expired') THEN 1 ELSE 0 END) AS BIGINT),
		CAST(sum(CASE WHEN started_at IS NOT NULL THEN 1 ELSE 0 END) AS BIGINT),
		CAST(sum(CASE WHEN started_at IS NOT NULL AND started_at > run_at THEN started_at - run_at ELSE 0 END) AS BIGINT)
		FROM (SELECT namespace, state, finished_at, started_at, run_at FROM tasks
			WHERE finished_at IS NOT NULL AND finished_at >= ?`+in+` ORDER BY finished_at DESC LIMIT ?) AS recent
		GROUP BY namespace, b ORDER BY namespace, b`, append(append([]any{since, bucket, since}, nsArgs...), max+1)...)
	if err != nil {
		return store.Activity{}, fmt.Errorf("task activity: %w", err)
	}
	total := 0
	buckets, err := sqldb.Collect(rows, func(r sqldb.Row) (store.ActivityBucket, error) {
		var b store.ActivityBucket
		var idx, wait int64
		if err := r.Scan(&b.Namespace, &idx, &b.Finished, &b.Failed, &b.Waited, &wait); err != nil {
			return b, err
		}
		b.Start = time.UnixMicro(since + idx*bucket).UTC()
		b.WaitTotal = time.Duration(wait) * time.Microsecond
		total += b.Finished
		return b, nil
	})
	if err != nil {
		return store.Activity{}, fmt.Errorf("task activity: %w", err)
	}
	return store.Activity{Buckets: buckets, Truncated: total > max}, nil
}

// CountHeld counts running steps by holder, from the running-steps index.
func (s *reads) CountHeld(ctx context.Context) (map[string]int, error) {
	rows, err := s.Read(ctx, `SELECT engine_id, count(*) FROM steps WHERE state = 'running' GROUP BY engine_id`)
	if err != nil {
		return nil, fmt.Errorf("count held steps: %w", err)
	}
	type held struct {
		id string
		n  int
	}
	list, err := sqldb.Collect(rows, func(r sqldb.Row) (held, error) {
		var h held
		return h, r.Scan(&h.id, &h.n)
	})
	if err != nil {
		return nil, fmt.Errorf("count held steps: %w", err)
	}
	out := make(map[string]int, len(list))
	for _, h := range list {
		out[h.id] = h.n
	}
	return out, nil
}
