package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/mattn/go-sqlite3" // registers "sqlite3", the driver weft's SQLite store uses too
)

// sqliteParams are the connection settings of weft's SQLite store
// (store/sqlite); River's SQLite database is opened with the same ones.
const sqliteParams = "_busy_timeout=5000&_journal_mode=WAL&_synchronous=NORMAL&_foreign_keys=off&_txlock=immediate"

// env is where one invocation runs: a temp dir for SQLite files, or a
// PostgreSQL server in which each run gets a database of its own.
type env struct {
	backend  string
	machine  string
	tmp      string
	seq      int
	admin    *pgxpool.Pool // PostgreSQL: the database the bench administers from
	baseURL  string
	pgss     bool     // pg_stat_statements is loaded and created
	pgConf   []string // server settings that matter for the comparison
	stopPG   func()
	cgoPerSt float64 // SQLite: cgo calls per prepared statement, measured

	riverCooldown time.Duration // River's FetchCooldown
}

// quiet is the logger given to both systems: errors only.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

func newEnv(ctx context.Context, o options) (_ *env, err error) {
	e := &env{backend: o.backend, machine: describeMachine(), stopPG: func() {}, riverCooldown: o.riverCooldown}
	e.tmp, err = os.MkdirTemp("", "weft-bench-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if o.backend == "sqlite" {
		e.cgoPerSt, err = calibrateCgo(filepath.Join(e.tmp, "calibrate.db"))
		return e, err
	}
	e.baseURL = o.db
	pgDir := ""
	if e.baseURL == "" {
		e.baseURL, pgDir, err = startCluster(ctx)
		if err != nil {
			return nil, err
		}
		e.stopPG = func() { stopCluster(pgDir) }
	}
	if pgDir != "" && o.pgStats {
		if err := enablePGSS(ctx, e.baseURL, pgDir); err != nil {
			fmt.Fprintf(os.Stderr, "bench: pg_stat_statements not loaded, statements will not be counted: %v\n", err)
		}
	}
	e.admin, err = pgxpool.New(ctx, e.baseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redactURL(e.baseURL), err)
	}
	if _, err := e.admin.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err == nil {
		var n int64
		e.pgss = e.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_statements`).Scan(&n) == nil
	}
	for _, name := range []string{"server_version", "fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "max_connections"} {
		var v string
		if err := e.admin.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return nil, fmt.Errorf("read setting %s: %w", name, err)
		}
		e.pgConf = append(e.pgConf, name+"="+v)
	}
	return e, nil
}

func (e *env) close() {
	if e.admin != nil {
		e.admin.Close()
	}
	e.stopPG()
	if e.tmp != "" {
		os.RemoveAll(e.tmp)
	}
}

// settings describes what both systems run with.
func (e *env) settings() []string {
	s := []string{fmt.Sprintf("worker concurrency %d (weft Concurrency, River MaxWorkers)", workerConcurrency),
		fmt.Sprintf("River FetchCooldown %s, other settings of both at their defaults", e.riverCooldown)}
	if e.backend == "sqlite" {
		s = append(s,
			"SQLite via mattn/go-sqlite3 for both, a fresh file per run, WAL, synchronous=NORMAL, busy_timeout 5s",
			"weft: its writes on the one writer connection it holds, 4 reader connections (its store's design); River: 1 connection (riversqlite's advice)")
		return s
	}
	pgss := "pg_stat_statements off"
	if e.pgss {
		pgss = "pg_stat_statements on"
	}
	return append(s,
		fmt.Sprintf("PostgreSQL, a fresh database per run, %d connections per system, TCP loopback", pgMaxConns),
		strings.Join(e.pgConf, " "), pgss)
}

// database is one run's fresh database for one system.
type database struct {
	path string // SQLite file
	url  string // PostgreSQL URL
	name string // PostgreSQL database name
	drop func()
}

func (e *env) fresh(ctx context.Context, system string) (*database, error) {
	e.seq++
	if e.backend == "sqlite" {
		dir := filepath.Join(e.tmp, fmt.Sprintf("%s-%d", system, e.seq))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		return &database{path: filepath.Join(dir, "bench.db"), drop: func() { os.RemoveAll(dir) }}, nil
	}
	name := fmt.Sprintf("bench_%s_%d_%d", system, os.Getpid(), e.seq)
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(e.baseURL)
	if err != nil {
		return nil, fmt.Errorf("parse URL: %w", err)
	}
	u.Path = "/" + name
	return &database{url: u.String(), name: name, drop: func() {
		if _, err := e.admin.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "bench: drop database %s: %v\n", name, err)
		}
	}}, nil
}

// queryCounter counts the statements one system sends: on PostgreSQL from
// pg_stat_statements (or committed transactions from pg_stat_database when
// the extension is not loaded); on SQLite, which has no server to ask, from
// the process's calls into C (every SQLite call of mattn/go-sqlite3 is one),
// converted to statements by a calibration.
type queryCounter struct {
	e  *env
	db *database
}

// counts returns the statements (or their estimate) and transactions so
// far. On PostgreSQL it first clears pg_stat_statements when reset is set,
// so that its statement list shows only what follows (one system runs at a
// time).
func (q queryCounter) counts(ctx context.Context, reset ...bool) (stmts, xacts float64, err error) {
	if q.e.backend == "sqlite" {
		return float64(cgoCalls()) / q.e.cgoPerSt, 0, nil
	}
	if !q.e.pgss {
		var x int64
		if err := q.e.admin.QueryRow(ctx, `SELECT coalesce(xact_commit + xact_rollback, 0) FROM pg_stat_database WHERE datname = $1`, q.db.name).Scan(&x); err != nil {
			return 0, 0, fmt.Errorf("pg_stat_database: %w", err)
		}
		return -1, float64(x), nil
	}
	if len(reset) > 0 && reset[0] {
		if _, err := q.e.admin.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
			return 0, 0, fmt.Errorf("pg_stat_statements_reset: %w", err)
		}
	}
	// pg_stat_database is written by each backend at most once a second
	// and when it goes idle for long; pg_stat_statements at once. Its
	// COMMITs are the transactions.
	var s, c int64
	err = q.e.admin.QueryRow(ctx, `
		SELECT coalesce(sum(calls), 0)::bigint,
		       coalesce(sum(calls) FILTER (WHERE query ~* '^\s*(commit|end)\M'), 0)::bigint
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1`, q.db.name).Scan(&s, &c)
	if err != nil {
		return 0, 0, fmt.Errorf("pg_stat_statements: %w", err)
	}
	return float64(s), float64(c), nil
}

// topStatements returns the statements of a database by calls, most first.
func (q queryCounter) topStatements(ctx context.Context, limit int) ([]statementStat, error) {
	if q.e.backend != "postgres" || !q.e.pgss {
		return nil, nil
	}
	rows, err := q.e.admin.Query(ctx, `
		SELECT s.calls, s.total_exec_time, s.rows, s.shared_blks_hit + s.shared_blks_read, left(regexp_replace(s.query, '\s+', ' ', 'g'), 160)
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
		WHERE d.datname = $1 ORDER BY s.calls DESC, s.total_exec_time DESC LIMIT $2`, q.db.name, limit)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (statementStat, error) {
		var s statementStat
		err := r.Scan(&s.Calls, &s.TotalMS, &s.Rows, &s.Buffers, &s.Query)
		return s, err
	})
}

type statementStat struct {
	Calls   int64   `json:"calls"`
	TotalMS float64 `json:"total_ms"`
	Rows    int64   `json:"rows"`
	Buffers int64   `json:"buffers"` // shared buffers hit or read
	Query   string  `json:"query"`
}

func cgoCalls() uint64 {
	s := []metrics.Sample{{Name: "/cgo/go-to-c-calls:calls"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// calibrateCgo measures how many calls into C one prepared statement costs
// through mattn/go-sqlite3, so that idle SQLite engines' cgo calls can be
// turned into an estimate of their statements.
func calibrateCgo(path string) (float64, error) {
	db, err := sql.Open("sqlite3", "file:"+path+"?"+sqliteParams)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)`); err != nil {
		return 0, fmt.Errorf("calibrate: %w", err)
	}
	st, err := db.Prepare(`SELECT count(*) FROM t WHERE v > ?`)
	if err != nil {
		return 0, fmt.Errorf("calibrate: %w", err)
	}
	defer st.Close()
	const n = 2000
	before := cgoCalls()
	for i := range n {
		var c int
		if err := st.QueryRow(i).Scan(&c); err != nil {
			return 0, fmt.Errorf("calibrate: %w", err)
		}
	}
	return float64(cgoCalls()-before) / n, nil
}

// startCluster starts a throwaway cluster with ../scripts/pgtest and
// returns its URL and directory.
func startCluster(ctx context.Context) (string, string, error) {
	cmd := exec.CommandContext(ctx, "bash", "../scripts/pgtest", "start")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("../scripts/pgtest start (run from bench/, or pass -db): %w", err)
	}
	vars := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if ok {
			vars[k] = strings.Trim(v, "'")
		}
	}
	u, dir := vars["WEFT_TEST_POSTGRES_URL"], vars["WEFT_PGTEST_DIR"]
	if u == "" || dir == "" {
		stopCluster(dir)
		return "", "", fmt.Errorf("../scripts/pgtest start printed no URL: %q", out)
	}
	return u, dir, nil
}

func stopCluster(dir string) {
	if dir == "" {
		return
	}
	cmd := exec.Command("bash", "../scripts/pgtest", "stop")
	cmd.Env = append(os.Environ(), "WEFT_PGTEST_DIR="+dir)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: ../scripts/pgtest stop: %v\n", err)
	}
}

// enablePGSS loads pg_stat_statements into the throwaway cluster: it must
// be preloaded, which takes a restart of the server (pg_ctl restart keeps
// the port it was started with).
func enablePGSS(ctx context.Context, baseURL, dir string) error {
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`)
	conn.Close(ctx)
	if err != nil {
		return err
	}
	bindir, err := os.ReadFile(filepath.Join(dir, "bindir"))
	if err != nil {
		return err
	}
	args := []string{filepath.Join(strings.TrimSpace(string(bindir)), "pg_ctl"), "restart", "-D", filepath.Join(dir, "data"), "-l", filepath.Join(dir, "log"), "-w", "-m", "fast"}
	if os.Geteuid() == 0 {
		args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl restart: %w: %s", err, out)
	}
	return nil
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// describeMachine reads the CPU model and count.
func describeMachine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d CPUs, %s/%s, %s", model, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// cpuTimes is the machine-wide CPU time from /proc/stat, to report the
// steal (time the hypervisor gave to other guests) during a scenario.
type cpuTimes struct{ total, steal, idle uint64 }

func readCPUTimes() (cpuTimes, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return cpuTimes{}, errors.New("/proc/stat is empty")
	}
	fields := strings.Fields(sc.Text()) // cpu user nice system idle iowait irq softirq steal ...
	if len(fields) < 9 || fields[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", sc.Text())
	}
	var t cpuTimes
	for i, f := range fields[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		if i < 8 { // guest time is already counted in user
			t.total += v
		}
		switch i {
		case 3:
			t.idle = v
		case 7:
			t.steal = v
		}
	}
	return t, nil
}

// busySince is the machine's busy time (neither idle nor steal) from a to
// t, in /proc/stat's ticks.
func (t cpuTimes) busySince(a cpuTimes) uint64 {
	return (t.total - a.total) - (t.steal - a.steal) - (t.idle - a.idle)
}

// busyShares returns the steal and the busy share of the machine's CPU
// time between a and b, in percent.
func busyShares(a, b cpuTimes) (steal, busy float64) {
	d := float64(b.total - a.total)
	if d <= 0 {
		return 0, 0
	}
	return 100 * float64(b.steal-a.steal) / d, 100 * float64(b.busySince(a)) / d
}

// cpuMeter measures the CPU time a burn-down costs, a task at a time: this
// process's (the engine or River, the handlers, the drivers) and the
// machine's busy time (the database's too, on this machine). The two
// systems doing the same work at the same rate can differ in what it
// costs: where the machine is nearly saturated, that is what the next task
// per second must come from.
type cpuMeter struct {
	process time.Duration
	machine cpuTimes
}

// userHZ is the unit of /proc/stat's times: USER_HZ, 100 on Linux.
const userHZ = 100

func startCPUMeter() (cpuMeter, error) {
	p, err := processCPU()
	if err != nil {
		return cpuMeter{}, err
	}
	m, err := readCPUTimes()
	if err != nil {
		return cpuMeter{}, err
	}
	return cpuMeter{process: p, machine: m}, nil
}

// record adds the CPU time per unit since m started to metrics, in
// microseconds: "process_cpu_us_per_<unit>" and "machine_cpu_us_per_<unit>".
func (m cpuMeter) record(metrics map[string]float64, units int, unit string) error {
	p, err := processCPU()
	if err != nil {
		return err
	}
	t, err := readCPUTimes()
	if err != nil {
		return err
	}
	metrics["process_cpu_us_per_"+unit] = float64((p - m.process).Microseconds()) / float64(units)
	metrics["machine_cpu_us_per_"+unit] = float64(t.busySince(m.machine)) * 1e6 / userHZ / float64(units)
	return nil
}
