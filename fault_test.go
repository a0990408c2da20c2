package weft_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/workflow"
)

// TestPostgresRestart restarts PostgreSQL under two busy engines and checks
// that every task still completes, each step exactly once in the audit.
//
// The restart is done on a private throwaway cluster that the test starts
// with scripts/pgtest, never on the shared one: the other packages' tests,
// which may run at the same time in "go test ./...", fail on any database
// error, so they would not survive even a short outage.
func TestPostgresRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a PostgreSQL server; skipped with -short")
	}
	if os.Getenv("WEFT_TEST_POSTGRES_URL") == "" || os.Getenv("WEFT_PGTEST_DIR") == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("WEFT_TEST_POSTGRES_URL or WEFT_PGTEST_DIR is not set: scripts/test starts the throwaway PostgreSQL this test needs")
		}
		t.Skip("WEFT_TEST_POSTGRES_URL or WEFT_PGTEST_DIR is not set; run ./scripts/test to start a throwaway PostgreSQL")
	}
	const (
		tasks       = 60
		stepSleep   = 20 * time.Millisecond
		deadline    = 90 * time.Second
		pollEvery   = 20 * time.Millisecond
		concurrency = 4
	)
	ctx := context.Background()
	pg := startPrivateCluster(t)

	schema := pgtesting.SchemaName("fault")
	logs := &countingLog{} // quiet: counts the warnings and errors of the engines and stores
	openStore := func(ctx context.Context) (postgres.Store, error) {
		return postgres.Open(ctx, pg.url, postgres.Options{Schema: schema, MaxConns: 8, Logger: slog.New(logs)})
	}
	mustOpen := func() postgres.Store {
		s, err := openStore(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}

	// Every handler run, by task and step: more than one run of a step is
	// allowed (at least once) but reported.
	var runsMu sync.Mutex
	runs := map[string]int{}
	sleepy := func(ctx context.Context, a *weft.Attempt) (any, error) {
		runsMu.Lock()
		runs[fmt.Sprintf("%d/%s", a.TaskID, a.Step)]++
		runsMu.Unlock()
		select {
		case <-time.After(stepSleep):
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		return map[string]any{"step": a.Step, "attempt": a.Number}, nil
	}
	w := workflow.New("fault", "chain", "1").
		Step("one", "sleepy").
		Step("two", "sleepy", workflow.DependsOn("one")).
		Step("three", "sleepy", workflow.DependsOn("two"))

	var engines []*weft.Engine
	for range 2 {
		e := newEngine(t, mustOpen(), weft.Config{
			Concurrency:       concurrency,
			HeartbeatInterval: 200 * time.Millisecond,
			LeaseTTL:          3 * time.Second,
			PollInterval:      50 * time.Millisecond,
			Logger:            slog.New(logs),
		})
		e.Handle("sleepy", sleepy)
		require.NoError(t, e.Register(ctx, w))
		engines = append(engines, e)
	}
	for _, e := range engines {
		start(t, e)
	}

	subs := make([]weft.Submission, tasks)
	for i := range subs {
		subs[i] = weft.Submission{Workflow: "fault/chain", Input: map[string]int{"n": i}}
	}
	res, err := engines[0].SubmitMany(ctx, subs)
	require.NoError(t, err)
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.Task.ID
	}

	// Restart the server once about a third of the tasks completed.
	observer, err := openStore(ctx)
	require.NoError(t, err)
	var before map[state.Task]int
	eventually(t, "a third of the tasks to complete", func() bool {
		var err error
		before, err = countTasks(ctx, observer)
		require.NoError(t, err)
		return before[state.TaskCompleted] >= tasks/3
	})
	require.NoError(t, observer.Close())
	errorsBefore := logs.errors()

	restartBegan := time.Now()
	pg.restart(t)
	serverBack := time.Now()

	// Poll through a store opened after the restart, retrying its errors.
	waitCtx, cancel := context.WithDeadline(ctx, restartBegan.Add(deadline))
	defer cancel()
	var fresh postgres.Store
	var openErrs int
	for {
		if fresh, err = openStore(waitCtx); err == nil {
			break
		}
		openErrs++
		if waitCtx.Err() != nil {
			t.Fatalf("could not open a store after the restart: %v", err)
		}
		time.Sleep(pollEvery)
	}
	t.Cleanup(func() { fresh.Close() })
	reconnected := time.Now()

	var counts map[state.Task]int
	var pollErrs int
	var lastPollErr error
	for {
		counts, err = countTasks(waitCtx, fresh)
		if err != nil {
			pollErrs++
			lastPollErr = err
		} else if counts[state.TaskCompleted] == tasks || counts[state.TaskFailed]+counts[state.TaskCancelled]+counts[state.TaskExpired] > 0 {
			break
		}
		if waitCtx.Err() != nil {
			t.Fatalf("after %s only %v of %d tasks ended (%d polls failed, last: %v); engine logs: %s",
				deadline, counts, tasks, pollErrs, lastPollErr, logs.summary())
		}
		time.Sleep(pollEvery)
	}
	allDone := time.Now()

	t.Logf("before the restart: %v; pg_ctl restart -m fast took %s; a fresh store opened %s later (%d failed tries)",
		before, serverBack.Sub(restartBegan).Round(time.Millisecond), reconnected.Sub(serverBack).Round(time.Millisecond), openErrs)
	t.Logf("recovery: all %d tasks ended %s after the restart began, %s after the server was back (%d polls failed)",
		tasks, allDone.Sub(restartBegan).Round(time.Millisecond), allDone.Sub(serverBack).Round(time.Millisecond), pollErrs)
	t.Logf("warnings and errors logged by the engines and stores: %s", logs.summary())
	require.Greater(t, logs.errors(), errorsBefore, "the engines never noticed the restart: the test proved nothing")
	require.Equal(t, tasks, counts[state.TaskCompleted], "task states: %v", counts)

	// Every task completed, each step completed exactly once, nothing failed.
	var completions []time.Time
	retried, reruns := 0, 0
	enginesSeen := map[string]int{}
	for _, id := range ids {
		task, err := fresh.GetTask(ctx, id)
		require.NoError(t, err)
		require.Equal(t, state.TaskCompleted, task.State, "task %d: %s", id, task.Error)
		require.Len(t, task.Steps, 3)
		for _, s := range task.Steps {
			require.Equal(t, state.StepCompleted, s.State, "task %d step %s: %s", id, s.Name, s.Error)
			if s.Attempts > 1 {
				retried++
			}
		}
		audit, err := fresh.Audit(ctx, id)
		require.NoError(t, err)
		done := map[string]int{}
		for _, a := range audit {
			require.NotEqual(t, string(state.StepFailed), a.To, "task %d: %+v", id, a)
			if a.To == string(state.StepCompleted) {
				done[a.Step]++
				if a.Step != "" {
					completions = append(completions, a.At)
					enginesSeen[a.EngineID]++
				}
			}
		}
		for _, name := range []string{"", "one", "two", "three"} {
			what := "step " + name
			if name == "" {
				what = "the task"
			}
			require.Equal(t, 1, done[name], "task %d: %s reached completed %d times; audit: %s", id, what, done[name], auditText(audit))
		}
	}
	runsMu.Lock()
	for key, n := range runs {
		if n > 1 {
			reruns++
			t.Logf("handler of %s ran %d times", key, n)
		}
	}
	require.Len(t, runs, 3*tasks, "handler runs by step")
	runsMu.Unlock()

	sort.Slice(completions, func(i, j int) bool { return completions[i].Before(completions[j]) })
	var gap time.Duration
	for i := 1; i < len(completions); i++ {
		gap = max(gap, completions[i].Sub(completions[i-1]))
	}
	t.Logf("steps with more than one attempt: %d; steps whose handler ran more than once: %d; completions by engine: %v; longest pause between step completions: %s",
		retried, reruns, enginesSeen, gap.Round(time.Millisecond))
}

// countTasks tallies the schema's tasks by state.
func countTasks(ctx context.Context, s store.Store) (map[state.Task]int, error) {
	list, err := s.ListTasks(ctx, store.TaskFilter{Limit: 1000})
	if err != nil {
		return nil, err
	}
	out := map[state.Task]int{}
	for _, t := range list {
		out[t.State]++
	}
	return out, nil
}

func auditText(entries []store.AuditEntry) string {
	var b strings.Builder
	for _, a := range entries {
		fmt.Fprintf(&b, "\n  %s %q %s->%s attempt %d by %s: %s", a.At.Format("15:04:05.000000"), a.Step, a.From, a.To, a.Attempt, a.EngineID, a.Reason)
	}
	return b.String()
}

// countingLog is a quiet slog handler: it prints nothing, counts warnings and
// errors by message and keeps the first error of each.
type countingLog struct {
	mu     sync.Mutex
	counts map[string]int
	first  map[string]string
	errs   int
}

func (h *countingLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *countingLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	key := r.Level.String() + " " + r.Message
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.counts == nil {
		h.counts, h.first = map[string]int{}, map[string]string{}
	}
	h.counts[key]++
	if r.Level >= slog.LevelError {
		h.errs++
	}
	if _, ok := h.first[key]; !ok {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" {
				h.first[key] = a.Value.String()
				return false
			}
			return true
		})
	}
	return nil
}

func (h *countingLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingLog) WithGroup(string) slog.Handler      { return h }

// count returns how often a record ("LEVEL message") was logged.
func (h *countingLog) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[key]
}

// total counts the warnings and errors logged.
func (h *countingLog) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.counts {
		n += c
	}
	return n
}

func (h *countingLog) errors() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.errs
}

func (h *countingLog) summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := make([]string, 0, len(h.counts))
	for k := range h.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %4d× %s", h.counts[k], k)
		if e := h.first[k]; e != "" {
			fmt.Fprintf(&b, " (first: %s)", e)
		}
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// TestPostgresLostClaimCommit cuts the connection of a claim transaction
// right after the server committed it, before the engine read the reply, as
// a network fault or a server shutdown at the wrong moment can. The engine
// sees the claim fail; the step is running in the database under that
// engine's lease. The engine must recover the step; it stays running forever
// if nothing reconciles the two, since the engine's heartbeat keeps renewing
// the lease of a step it does not run.
func TestPostgresLostClaimCommit(t *testing.T) {
	t.Parallel()
	raw := pgtesting.URL(t)
	u, err := url.Parse(raw)
	require.NoError(t, err)
	if u.Host == "" {
		t.Skipf("the test's proxy needs a TCP address in WEFT_TEST_POSTGRES_URL")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	p := &commitCutter{target: u.Host, match: "SET state = 'running', sub = ''"} // the claim's UPDATE
	go p.serve(ln)
	proxied := *u
	proxied.Host = ln.Addr().String()
	q := proxied.Query()
	q.Set("sslmode", "disable") // the proxy reads the protocol in the clear
	proxied.RawQuery = q.Encode()

	ctx := context.Background()
	schema := pgtesting.SchemaName("fault")
	logs := &countingLog{}
	direct, err := postgres.Open(ctx, raw, postgres.Options{Schema: schema, MaxConns: 3, Logger: slog.New(logs)})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = direct.DB().ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		direct.Close()
	})
	s, err := postgres.Open(ctx, proxied.String(), postgres.Options{Schema: schema, MaxConns: 4, Logger: slog.New(logs)})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })

	var runs atomic.Int32
	e := newEngine(t, s, weft.Config{Concurrency: 4, Logger: slog.New(logs)}) // lease 1s, heartbeat 100ms
	e.Handle("h", func(context.Context, *weft.Attempt) (any, error) { runs.Add(1); return "ok", nil })
	require.NoError(t, e.Register(ctx, workflow.New("fault", "one", "1").Step("s", "h")))
	start(t, e)

	p.armed.Store(true)
	// The claim cut is the claim loop's, or the submission's own where its
	// write claimed the step for this idle engine: then the submission
	// sees its commit's reply lost (unavailable), though the task exists.
	var id int64
	if res, err := e.Submit(ctx, weft.Submission{Workflow: "fault/one"}); err == nil {
		id = res.Task.ID
	} else {
		require.ErrorIs(t, err, store.ErrUnavailable, "a submission whose commit's reply was lost")
		tasks, lerr := direct.ListTasks(ctx, store.TaskFilter{})
		require.NoError(t, lerr)
		require.Len(t, tasks, 1, "the submission's commit went through")
		id = tasks[0].ID
	}
	const deadline = 10 * time.Second // ten lease TTLs
	began := time.Now()
	var task *weft.Task
	for {
		task, err = direct.GetTask(ctx, id)
		require.NoError(t, err)
		if task.State.Terminal() || time.Since(began) > deadline {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, int32(1), p.cut.Load(), "the proxy cut no claim commit: the test proved nothing")
	if task.State != state.TaskCompleted {
		audit, _ := direct.Audit(ctx, task.ID)
		engines, _ := direct.ListEngines(ctx)
		live := make([]string, len(engines))
		for i, en := range engines {
			live[i] = fmt.Sprintf("%s (heartbeat %s ago)", en.ID, time.Since(en.HeartbeatAt).Round(time.Millisecond))
		}
		st := task.Steps[0]
		t.Fatalf("task %d is still %s %s after its claim's commit reply was lost: step %q is %s, attempt %d, held by %s; "+
			"the handler ran %d times; live engines: %v; this engine is %s.\nlogs: %s\naudit: %s",
			task.ID, task.State, deadline, st.Name, st.State, st.Attempts, st.EngineID, runs.Load(), live, e.ID(), logs.summary(), auditText(audit))
	}
	t.Logf("recovered %s after the lost claim commit; the handler ran %d times", time.Since(began).Round(time.Millisecond), runs.Load())
}

// commitCutter is a TCP proxy to PostgreSQL. Once armed, on the COMMIT of the
// first transaction that ran a statement containing match (a COMMIT alone,
// or in a batch with other statements, which ends at its Sync), it forwards
// the COMMIT, waits for the server's reply, drops it and closes the
// client's connection: the transaction is committed, the client sees a
// broken connection. Clients must not use TLS.
type commitCutter struct {
	target string
	match  string
	armed  atomic.Bool
	cut    atomic.Int32
}

func (p *commitCutter) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

// readPGMessage reads one frontend message: type byte (unless untyped, as
// the startup packet is), length, body.
func readPGMessage(r io.Reader, typed bool) ([]byte, error) {
	n := 4
	if typed {
		n = 5
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	l := int(binary.BigEndian.Uint32(hdr[n-4:]))
	if l < 4 || l > 1<<30 {
		return nil, fmt.Errorf("bad message length %d", l)
	}
	msg := make([]byte, n+l-4)
	copy(msg, hdr)
	_, err := io.ReadFull(r, msg[n:])
	return msg, err
}

func (p *commitCutter) handle(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	var once sync.Once
	closeBoth := func() { once.Do(func() { client.Close(); server.Close() }) }
	defer closeBoth()
	var blackhole atomic.Bool
	replied := make(chan struct{})
	go func() {
		defer closeBoth()
		buf := make([]byte, 32<<10)
		signalled := false
		for {
			n, err := server.Read(buf)
			if n > 0 {
				if blackhole.Load() {
					if !signalled {
						signalled = true
						close(replied)
					}
				} else if _, err := client.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	// The startup packet, possibly preceded by SSL or GSS encryption
	// requests (which the server refuses with one byte), has no type byte.
	for {
		m, err := readPGMessage(client, false)
		if err != nil {
			return
		}
		if _, err := server.Write(m); err != nil {
			return
		}
		if len(m) < 8 {
			return
		}
		if code := binary.BigEndian.Uint32(m[4:8]); code != 80877103 && code != 80877104 {
			break
		}
	}
	statements := map[string]string{} // prepared statement name -> text
	isCommit := func(q string) bool { return strings.EqualFold(strings.TrimSpace(q), "commit") }
	// matched: the transaction ran the statement to match; commits: the
	// batch under way (extended protocol, up to its Sync) commits it.
	matched, commits := false, false
	cut := func(m []byte) {
		blackhole.Store(true)
		if _, err := server.Write(m); err != nil {
			return
		}
		select {
		case <-replied:
		case <-time.After(5 * time.Second):
		}
		p.cut.Add(1)
	}
	for {
		m, err := readPGMessage(client, true)
		if err != nil {
			return
		}
		fields := strings.Split(string(m[5:]), "\x00")
		switch m[0] {
		case 'P': // Parse: statement name, query
			if len(fields) > 1 {
				statements[fields[0]] = fields[1]
				matched = matched || strings.Contains(fields[1], p.match)
			}
		case 'B': // Bind: portal, statement name
			if len(fields) > 1 {
				matched = matched || strings.Contains(statements[fields[1]], p.match)
				commits = commits || isCommit(statements[fields[1]])
			}
		case 'S': // Sync: the end of a batch, which may have held its COMMIT
			if commits && matched && p.armed.CompareAndSwap(true, false) {
				cut(m)
				return
			}
			if commits {
				matched, commits = false, false
			}
		case 'Q': // simple query: pgx sends BEGIN and COMMIT this way
			q := strings.ToLower(strings.TrimSpace(fields[0]))
			matched = matched || strings.Contains(fields[0], p.match)
			if q == "commit" && matched && p.armed.CompareAndSwap(true, false) {
				cut(m)
				return
			}
			if q == "begin" || q == "commit" || q == "rollback" {
				matched = false
			}
		}
		if _, err := server.Write(m); err != nil {
			return
		}
	}
}
