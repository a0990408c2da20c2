// Command soak submits tasks continuously to an engine whose workflow keeps
// completed tasks for a short retention, and samples the size of the
// tables as it goes, to show that retention keeps the database flat (see
// scripts/soak-retention and docs/retention.md). It prints one line per
// sample and a final summary:
//
//	soak: store=… submitted=N deleted=N tasks_rows first=… last=… max=… bytes first=… last=… max=…
//
// and exits 1 when the table size at the end exceeds twice its size at the
// first sample taken after the warm-up (the retention window filled and,
// on PostgreSQL, autovacuum had its first round).
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/mattn/go-sqlite3" // the SQLite driver, to read the file's page counts

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

func main() {
	url := flag.String("db", "", "database URL (postgres://…) or SQLite file; default: a SQLite file in a temporary directory")
	duration := flag.Duration("duration", 2*time.Minute, "how long to submit")
	rate := flag.Int("rate", 200, "tasks submitted per second")
	keep := flag.Duration("retention", 5*time.Second, "how long completed tasks are kept")
	sample := flag.Duration("sample", 10*time.Second, "how often to sample the table sizes")
	warmup := flag.Duration("warmup", time.Minute, "the reference size is the first sample after this long (the retention window filled and, on PostgreSQL, autovacuum ran once: its naptime is 1m)")
	flag.Parse()
	if err := run(*url, *duration, *rate, *keep, *sample, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(url string, duration time.Duration, rate int, keep, every, warmup time.Duration) error {
	ctx := context.Background()
	if url == "" {
		dir, err := os.MkdirTemp("", "weft-soak")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		url = filepath.Join(dir, "soak.db")
	}
	db, err := weftdb.Open(ctx, url, weftdb.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	e, err := weft.New(db, weft.Config{Concurrency: 32, UpkeepInterval: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	e.Handle("soak.noop", func(ctx context.Context, a *weft.Attempt) (any, error) { return map[string]int{"ok": 1}, nil })
	w := workflow.New("soak", "job", "1").Step("work", "soak.noop")
	w.Retention = &workflow.Retention{Completed: workflow.Duration(keep)}
	if err := e.Register(ctx, w); err != nil {
		return err
	}
	var deleted atomic.Int64
	defer e.Subscribe(func(ev weft.Event) {
		if ev.Kind == weft.EventPruned {
			deleted.Add(int64(ev.Count))
		}
	})()
	if err := e.Start(ctx); err != nil {
		return err
	}
	defer e.Stop(ctx)
	measure, err := sizer(ctx, url)
	if err != nil {
		return err
	}
	type point struct {
		tasks int
		size
	}
	var points []point
	take := func(label string) error {
		n, err := e.DeleteTasks(ctx, weft.BulkRequest{All: true, DryRun: true, Filter: weft.TaskFilter{}})
		if err != nil {
			return err
		}
		sz, err := measure(ctx)
		if err != nil {
			return err
		}
		points = append(points, point{n.Matched, sz})
		fmt.Printf("%s tasks_rows=%d bytes=%d index_bytes=%d dead_rows=%d audit_bytes=%d audit_dead_rows=%d audit_partitions=%d deleted=%d\n",
			label, n.Matched, sz.bytes, sz.indexBytes, sz.dead, sz.auditBytes, sz.auditDead, sz.auditParts, deleted.Load())
		return nil
	}
	if err := take("t=0s"); err != nil {
		return err
	}
	submitted := 0
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	next := start.Add(every)
	per := max(rate/10, 1)
	for time.Since(start) < duration {
		<-tick.C
		subs := make([]weft.Submission, per)
		for i := range subs {
			subs[i] = weft.Submission{Workflow: "soak/job", Input: map[string]int{"n": submitted + i}, Tags: map[string]string{"run": "soak"}}
		}
		if _, err := e.SubmitMany(ctx, subs); err != nil {
			return err
		}
		submitted += per
		if time.Now().After(next) {
			next = next.Add(every)
			if err := take(fmt.Sprintf("t=%s", time.Since(start).Round(time.Second))); err != nil {
				return err
			}
		}
	}
	if err := take(fmt.Sprintf("t=%s", time.Since(start).Round(time.Second))); err != nil {
		return err
	}
	// The reference is the first sample after the warm-up.
	ref := points[len(points)-1]
	for i, p := range points {
		if time.Duration(i)*every >= max(warmup, keep+2*time.Second) {
			ref = p
			break
		}
	}
	last, maxP := points[len(points)-1], points[0]
	for _, p := range points {
		maxP.tasks, maxP.bytes, maxP.dead = max(maxP.tasks, p.tasks), max(maxP.bytes, p.bytes), max(maxP.dead, p.dead)
	}
	store := "sqlite"
	if strings.HasPrefix(url, "postgres") {
		store = "postgres"
	}
	fmt.Printf("soak: store=%s duration=%s rate=%d/s retention=%s submitted=%d deleted=%d tasks_rows ref=%d last=%d max=%d bytes ref=%d last=%d max=%d dead_rows ref=%d last=%d max=%d\n",
		store, duration, rate, keep, submitted, deleted.Load(), ref.tasks, last.tasks, maxP.tasks, ref.bytes, last.bytes, maxP.bytes, ref.dead, last.dead, maxP.dead)
	if last.bytes > 2*ref.bytes {
		return fmt.Errorf("the tables grew from %d to %d bytes", ref.bytes, last.bytes)
	}
	return nil
}

// size is what the tables that hold tasks' data take: bytes, indexes and
// TOAST included; of those, the indexes' bytes; and the dead rows
// VACUUM has yet to reclaim (PostgreSQL's n_dead_tup; 0 on SQLite, which
// reuses a deleted row's page at once).
type size struct {
	bytes, indexBytes, dead int64
	// Of those, the audit trail's, and how many partitions it has
	// (PostgreSQL).
	auditBytes, auditDead, auditParts int64
}

// sizer returns a function that measures the tables that hold tasks'
// data: on PostgreSQL from the catalog and pg_stat_user_tables, on SQLite
// the pages in use (the file's pages less its free list) times the page
// size.
func sizer(ctx context.Context, url string) (func(context.Context) (size, error), error) {
	tables := []string{"tasks", "steps", "audit", "signals", "task_tags"}
	if strings.HasPrefix(url, "postgres") {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return nil, err
		}
		// A partitioned table's size is its partitions' (the audit trail's
		// time partitions, audit_kept and audit_default).
		const q = `SELECT sum(pg_total_relation_size(c.oid))::bigint, sum(pg_indexes_size(c.oid))::bigint, sum(COALESCE(s.n_dead_tup, 0))::bigint,
				coalesce(sum(pg_total_relation_size(c.oid)) FILTER (WHERE p.t = 'audit'), 0)::bigint,
				coalesce(sum(COALESCE(s.n_dead_tup, 0)) FILTER (WHERE p.t = 'audit'), 0)::bigint,
				count(*) FILTER (WHERE p.t = 'audit' AND p.level > 0)
			FROM unnest($1::text[]) AS p0(t), LATERAL (SELECT p0.t, to_regclass(p0.t) AS relid, 0 AS level
				UNION SELECT p0.t, relid, level FROM pg_partition_tree(to_regclass(p0.t))) AS p
			JOIN pg_class c ON c.oid = p.relid LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid`
		return func(ctx context.Context) (size, error) {
			var sz size
			err := conn.QueryRow(ctx, q, tables).Scan(&sz.bytes, &sz.indexBytes, &sz.dead, &sz.auditBytes, &sz.auditDead, &sz.auditParts)
			return sz, err
		}, nil
	}
	path := strings.TrimPrefix(url, "sqlite://")
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (size, error) {
		var pages, free, pageSize int64
		if err := db.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
			return size{}, err
		}
		if err := db.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&free); err != nil {
			return size{}, err
		}
		if err := db.QueryRowContext(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil {
			return size{}, err
		}
		return size{bytes: (pages - free) * pageSize}, nil
	}, nil
}
