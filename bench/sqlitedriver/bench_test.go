package sqlitedriver

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	insertBatch = 1000   // rows per transaction in InsertBatch
	queueRows   = 50_000 // ready rows before ClaimComplete / rows read by PointRead
)

func requireDriver(tb testing.TB) {
	tb.Helper()
	if SQLDriver == "" {
		tb.Skip("no driver compiled in: run with -tags mattn, -tags modernc or -tags ncruces")
	}
}

// dbPath returns a fresh file in a new temp dir, removed at the end.
func dbPath(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "weft-sqlitedriver-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "weft.db")
}

func openDB(tb testing.TB) *sql.DB {
	tb.Helper()
	requireDriver(tb)
	db, err := Open(dbPath(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// contexts: weft passes cancellable contexts down to the store; drivers take
// a slower path for those (mattn runs each statement on a fresh goroutine so
// that it can interrupt it), so every benchmark runs with both kinds.
var contexts = []struct {
	name string
	make func() (context.Context, context.CancelFunc)
}{
	{"background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
	{"cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
}

// forContexts runs f as one sub-benchmark per kind of context.
func forContexts(b *testing.B, f func(b *testing.B, ctx context.Context)) {
	for _, c := range contexts {
		b.Run("ctx="+c.name, func(b *testing.B) {
			ctx, cancel := c.make()
			defer cancel()
			f(b, ctx)
		})
	}
}

func prepare(tb testing.TB, db *sql.DB, q string) *sql.Stmt {
	tb.Helper()
	st, err := db.Prepare(q)
	if err != nil {
		tb.Fatalf("prepare %q: %v", q, err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// TestConfig checks that the DSN really gives WAL, synchronous=NORMAL,
// busy_timeout=5000, foreign_keys=off, and that Begin takes the write lock at
// once (BEGIN IMMEDIATE), with a deferred control to show the check bites.
func TestConfig(t *testing.T) {
	requireDriver(t)
	ctx := context.Background()
	path := dbPath(t)
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	var version, journal string
	var syncMode, busy, fk int
	for _, c := range []struct {
		q    string
		dest any
	}{
		{"SELECT sqlite_version()", &version},
		{"PRAGMA journal_mode", &journal},
		{"PRAGMA synchronous", &syncMode},
		{"PRAGMA busy_timeout", &busy},
		{"PRAGMA foreign_keys", &fk},
	} {
		if err := db.QueryRow(c.q).Scan(c.dest); err != nil {
			t.Fatalf("%s: %v", c.q, err)
		}
	}
	t.Logf("driver=%s sqlite_version=%s journal_mode=%s synchronous=%d busy_timeout=%d foreign_keys=%d",
		DriverLabel, version, journal, syncMode, busy, fk)
	t.Logf("DSN: %s", DSN("/path/to/weft.db", BusyTimeoutMS, "immediate"))
	if journal != "wal" || syncMode != 1 || busy != BusyTimeoutMS || fk != 0 {
		t.Fatalf("wrong settings: journal_mode=%s synchronous=%d busy_timeout=%d foreign_keys=%d", journal, syncMode, busy, fk)
	}

	// A second, independent connection that does not wait for locks.
	other, err := sql.Open(SQLDriver, DSN(path, 0, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	oc, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	isBusy := func(err error) bool {
		return err != nil && (strings.Contains(err.Error(), "locked") || strings.Contains(err.Error(), "busy"))
	}

	// 1. db.Begin with _txlock=immediate must hold the write lock before any
	// statement runs in the transaction.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = oc.ExecContext(ctx, "BEGIN IMMEDIATE")
	if !isBusy(err) {
		if err == nil {
			oc.ExecContext(ctx, "ROLLBACK")
		}
		t.Fatalf("_txlock=immediate: a second writer could still BEGIN IMMEDIATE (err=%v): Begin did not take the write lock", err)
	}
	t.Logf("while the immediate tx is open, another writer gets: %v", err)

	// 2. busy_timeout=5000 on the benchmark connection really waits: shorten
	// a copy to 300ms and time how long it waits for the lock held by oc.
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := oc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("after rollback the lock should be free: %v", err)
	}
	waiter, err := sql.Open(SQLDriver, DSN(path, 300, "immediate"))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	start := time.Now()
	wtx, err := waiter.BeginTx(ctx, nil)
	waited := time.Since(start)
	if err == nil {
		wtx.Rollback()
		t.Fatalf("waiter got the write lock while another connection held it")
	}
	if !isBusy(err) || waited < 250*time.Millisecond {
		t.Fatalf("busy_timeout=300: waited %v, err %v", waited, err)
	}
	t.Logf("busy_timeout=300 waited %v before: %v", waited.Round(time.Millisecond), err)
	if _, err := oc.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}

	// 3. Control: without _txlock, Begin is deferred and takes no lock, so
	// the same probe succeeds. Shows that check 1 discriminates.
	deferred, err := sql.Open(SQLDriver, DSN(path, BusyTimeoutMS, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer deferred.Close()
	dtx, err := deferred.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("control: a deferred Begin should not block other writers, got %v", err)
	}
	oc.ExecContext(ctx, "ROLLBACK")
	dtx.Rollback()
}

// TestClaimComplete runs one claim/complete round and checks the rows.
func TestClaimComplete(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	ins := prepare(t, db, InsertSQL)
	var next int64
	if err := Fill(ctx, db, ins, rand.New(rand.NewPCG(1, 2)), &next, 1000, insertBatch); err != nil {
		t.Fatal(err)
	}
	q := newQueue(t, db)
	n, err := q.claimComplete(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 100 {
		t.Fatalf("claimed %d rows, want 100", n)
	}
	var completed, attempts, results, minReadyKey, maxDoneKey int64
	db.QueryRow(`SELECT count(*), sum(attempt), count(result), max(sort_key) FROM steps WHERE state='completed' AND engine_id='engine-1'`).Scan(&completed, &attempts, &results, &maxDoneKey)
	db.QueryRow(`SELECT min(sort_key) FROM steps WHERE state='ready'`).Scan(&minReadyKey)
	if completed != 100 || attempts != 100 || results != 100 || maxDoneKey > minReadyKey {
		t.Fatalf("completed=%d attempts=%d results=%d maxDoneKey=%d minReadyKey=%d", completed, attempts, results, maxDoneKey, minReadyKey)
	}
}

// BenchmarkInsertBatch: 1000 rows per transaction, prepared INSERT.
// One op = one row (ns/op is ns per row); run with a fixed -benchtime=Nx so
// every driver ends with the same table size.
func BenchmarkInsertBatch(b *testing.B) {
	b.Run("driver="+DriverLabel, func(b *testing.B) {
		forContexts(b, func(b *testing.B, ctx context.Context) {
			db := openDB(b)
			ins := prepare(b, db, InsertSQL)
			rng := rand.New(rand.NewPCG(1, 2))
			var next int64
			b.ReportAllocs()
			b.ResetTimer()
			if err := Fill(ctx, db, ins, rng, &next, b.N, insertBatch); err != nil {
				b.Fatal(err)
			}
		})
	})
}

type queue struct {
	db                      *sql.DB
	claim, complete, insert *sql.Stmt
	ids                     []int64
	buf                     []byte
	rng                     *rand.Rand
	next                    int64
}

func newQueue(tb testing.TB, db *sql.DB) *queue {
	return &queue{
		db:       db,
		claim:    prepare(tb, db, ClaimSQL),
		complete: prepare(tb, db, CompleteSQL),
		insert:   prepare(tb, db, InsertSQL),
		rng:      rand.New(rand.NewPCG(3, 4)),
		next:     1 << 20,
	}
}

// claimComplete claims up to 100 ready steps in one transaction, then marks
// each completed with a small JSON result in a second one. It returns the
// number of rows.
func (q *queue) claimComplete(ctx context.Context) (int, error) {
	tx, err := q.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	rows, err := tx.StmtContext(ctx, q.claim).QueryContext(ctx, "engine-1")
	if err != nil {
		tx.Rollback()
		return 0, err
	}
	q.ids = q.ids[:0]
	for rows.Next() {
		var id, taskID int64
		var name string
		if err := rows.Scan(&id, &taskID, &name); err != nil {
			rows.Close()
			tx.Rollback()
			return 0, err
		}
		q.ids = append(q.ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		tx.Rollback()
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	if len(q.ids) == 0 {
		return 0, nil
	}

	tx, err = q.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	st := tx.StmtContext(ctx, q.complete)
	for _, id := range q.ids {
		q.buf = append(q.buf[:0], `{"status":"ok","step_id":`...)
		q.buf = strconv.AppendInt(q.buf, id, 10)
		q.buf = append(q.buf, `,"output":{"rows":42,"bytes":1337},"took_ms":17}`...)
		if _, err := st.ExecContext(ctx, q.buf, id); err != nil {
			tx.Rollback()
			return 0, err
		}
	}
	return len(q.ids), tx.Commit()
}

// refill drops completed steps and inserts queueRows fresh ready ones.
func (q *queue) refill(ctx context.Context) error {
	if _, err := q.db.ExecContext(ctx, `DELETE FROM steps WHERE state = 'completed'`); err != nil {
		return err
	}
	return Fill(ctx, q.db, q.insert, q.rng, &q.next, queueRows, insertBatch)
}

// BenchmarkClaimComplete: claim 100 (UPDATE ... RETURNING) in one tx,
// complete each in a second tx. One op = one row (ns/op is ns per row);
// run with a -benchtime=Nx that is a multiple of 100.
func BenchmarkClaimComplete(b *testing.B) {
	b.Run("driver="+DriverLabel, func(b *testing.B) {
		forContexts(b, func(b *testing.B, ctx context.Context) {
			db := openDB(b)
			q := newQueue(b, db)
			if err := q.refill(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				n, err := q.claimComplete(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					b.StopTimer()
					if err := q.refill(ctx); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					continue
				}
				done += n
			}
		})
	})
}

// BenchmarkPointRead: SELECT one row (8 columns, ~70-byte result) by
// primary key through a prepared statement, random ids over 50k rows
// (~6.5 MB of pages). cache=default is SQLite's default 2 MB page cache, so
// many lookups go to the OS page cache; cache=64MiB holds the whole file and
// leaves mostly driver and SQLite CPU cost.
func BenchmarkPointRead(b *testing.B) {
	b.Run("driver="+DriverLabel, func(b *testing.B) {
		for _, c := range []struct{ name, pragma string }{
			{"default", ""},
			{"64MiB", "PRAGMA cache_size = -65536"},
		} {
			b.Run("cache="+c.name, func(b *testing.B) {
				forContexts(b, func(b *testing.B, ctx context.Context) { benchPointRead(b, ctx, c.pragma) })
			})
		}
	})
}

func benchPointRead(b *testing.B, ctx context.Context, pragma string) {
	db := openDB(b)
	ins := prepare(b, db, InsertSQL)
	var next int64
	if err := Fill(ctx, db, ins, rand.New(rand.NewPCG(1, 2)), &next, queueRows, insertBatch); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE steps SET state = 'completed', attempt = 1, engine_id = 'engine-1',
		result = CAST('{"status":"ok","step_id":' || id || ',"output":{"rows":42,"bytes":1337},"took_ms":17}' AS BLOB)`); err != nil {
		b.Fatal(err)
	}
	// Same starting point for every driver: everything in the main file.
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		b.Fatal(err)
	}
	if pragma != "" {
		if _, err := db.Exec(pragma); err != nil {
			b.Fatal(err)
		}
	}
	sel := prepare(b, db, PointSQL)
	rng := rand.New(rand.NewPCG(5, 6))
	var (
		id, taskID, sortKey, attempt int64
		name, state, engineID        string
		result                       []byte
	)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		want := 1 + rng.Int64N(queueRows)
		if err := sel.QueryRowContext(ctx, want).Scan(&id, &taskID, &name, &state, &sortKey, &attempt, &engineID, &result); err != nil {
			b.Fatal(err)
		}
		if id != want || len(result) == 0 {
			b.Fatalf("read id %d (result %q), want %d", id, result, want)
		}
	}
}
