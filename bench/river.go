package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
)

// noopArgs is River's no-op job.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

// riverRun is one River client on a fresh database. River's client is
// generic in the driver's transaction type; the scenarios only need what
// riverOps offers.
type riverRun struct {
	ops   riverOps
	count queryCounter
	close func()
}

type riverOps interface {
	insertMany(ctx context.Context, params []river.InsertManyParams) error
	start(ctx context.Context) error
	stop(ctx context.Context) error
}

type riverClient[TTx any] struct{ c *river.Client[TTx] }

func (r riverClient[TTx]) insertMany(ctx context.Context, p []river.InsertManyParams) error {
	_, err := r.c.InsertMany(ctx, p)
	return err
}
func (r riverClient[TTx]) start(ctx context.Context) error { return r.c.Start(ctx) }
func (r riverClient[TTx]) stop(ctx context.Context) error  { return r.c.Stop(ctx) }

// newRiverClient migrates drv's database to River's schema and makes a
// client of MaxWorkers workers that call work for each job.
func newRiverClient[TTx any](ctx context.Context, drv riverdriver.Driver[TTx], cooldown time.Duration, work func()) (riverClient[TTx], error) {
	m, err := rivermigrate.New(drv, &rivermigrate.Config{Logger: quiet})
	if err != nil {
		return riverClient[TTx]{}, fmt.Errorf("river migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return riverClient[TTx]{}, fmt.Errorf("river migrate: %w", err)
	}
	return riverWorkerClient(drv, cooldown, work)
}

// riverWorkerClient is newRiverClient on a database already migrated.
func riverWorkerClient[TTx any](drv riverdriver.Driver[TTx], cooldown time.Duration, work func()) (riverClient[TTx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error {
		work()
		return nil
	}))
	c, err := river.NewClient(drv, &river.Config{
		Logger:        quiet,
		FetchCooldown: cooldown,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workerConcurrency}},
		Workers:       workers,
	})
	if err != nil {
		return riverClient[TTx]{}, fmt.Errorf("river client: %w", err)
	}
	return riverClient[TTx]{c: c}, nil
}

// openRiver opens a River client on a fresh database with the settings
// weft gets: the same SQLite driver and pragmas, or a pool of the same size.
func openRiver(ctx context.Context, e *env, work func()) (_ *riverRun, err error) {
	db, err := e.fresh(ctx, "river")
	if err != nil {
		return nil, err
	}
	closeDB := func() {}
	defer func() {
		if err != nil {
			closeDB()
			db.drop()
		}
	}()
	var ops riverOps
	if e.backend == "sqlite" {
		var sdb *sql.DB
		if sdb, err = sql.Open("sqlite3", "file:"+db.path+"?"+sqliteParams); err != nil {
			return nil, err
		}
		closeDB = func() { sdb.Close() }
		sdb.SetMaxOpenConns(1) // riversqlite's advice against SQLITE_BUSY
		ops, err = newRiverClient(ctx, riversqlite.New(sdb), e.riverCooldown, work)
	} else {
		var cfg *pgxpool.Config
		if cfg, err = pgxpool.ParseConfig(db.url); err != nil {
			return nil, err
		}
		cfg.MaxConns = pgMaxConns
		var pool *pgxpool.Pool
		if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return nil, err
		}
		closeDB = pool.Close
		ops, err = newRiverClient(ctx, riverpgxv5.New(pool), e.riverCooldown, work)
	}
	if err != nil {
		return nil, err
	}
	return &riverRun{ops: ops, count: queryCounter{e: e, db: db}, close: func() {
		ops.stop(context.Background())
		closeDB()
		db.drop()
	}}, nil
}

func insertNoops(ctx context.Context, ops riverOps, n int) error {
	for left := n; left > 0; left -= submitBatch {
		p := make([]river.InsertManyParams, min(left, submitBatch))
		for i := range p {
			p[i].Args = noopArgs{}
		}
		if err := ops.insertMany(ctx, p); err != nil {
			return fmt.Errorf("river insert: %w", err)
		}
	}
	return nil
}

func riverSingle(ctx context.Context, e *env, n int, _ options) (sample, error) {
	done := newCountdown(n)
	r, err := openRiver(ctx, e, done.tick)
	if err != nil {
		return sample{}, err
	}
	defer r.close()
	if err := insertNoops(ctx, r.ops, n); err != nil {
		return sample{}, err
	}
	s0, x0, err := r.count.counts(ctx, true)
	if err != nil {
		return sample{}, err
	}
	meter, err := startCPUMeter()
	if err != nil {
		return sample{}, err
	}
	start := time.Now()
	if err := r.ops.start(ctx); err != nil {
		return sample{}, err
	}
	if err := done.wait(ctx); err != nil {
		return sample{}, err
	}
	if err := r.ops.stop(ctx); err != nil { // the completer flushes on stop
		return sample{}, err
	}
	s := sample{value: float64(n) / time.Since(start).Seconds(), metrics: map[string]float64{}}
	if err := meter.record(s.metrics, n, "task"); err != nil {
		return sample{}, err
	}
	if err := statementsPerUnit(ctx, r.count, &s, s0, x0, n, "task"); err != nil {
		return sample{}, err
	}
	s.top, err = r.count.topStatements(ctx, 12)
	return s, err
}

func riverSubmit(ctx context.Context, e *env, n int, _ options) (sample, error) {
	r, err := openRiver(ctx, e, func() {})
	if err != nil {
		return sample{}, err
	}
	defer r.close()
	s0, x0, err := r.count.counts(ctx, true)
	if err != nil {
		return sample{}, err
	}
	meter, err := startCPUMeter()
	if err != nil {
		return sample{}, err
	}
	start := time.Now()
	if err := insertNoops(ctx, r.ops, n); err != nil {
		return sample{}, err
	}
	s := sample{value: float64(n) / time.Since(start).Seconds(), metrics: map[string]float64{}}
	if err := meter.record(s.metrics, n, "task"); err != nil {
		return sample{}, err
	}
	return s, statementsPerUnit(ctx, r.count, &s, s0, x0, n, "task")
}

func riverIdle(ctx context.Context, e *env, _ int, o options) (sample, error) {
	r, err := openRiver(ctx, e, func() {})
	if err != nil {
		return sample{}, err
	}
	defer r.close()
	if err := r.ops.start(ctx); err != nil {
		return sample{}, err
	}
	s, err := idleFor(ctx, r.count, o.idle)
	return s, errors.Join(err, r.ops.stop(ctx))
}
