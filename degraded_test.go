package weft_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/workflow"
)

// errDiskFull is what SQLite says when its disk is full.
var errDiskFull = errors.New("database or disk is full")

// fullDisk is a store whose writes fail while full is set, as SQLite's do
// on a full disk (reads still work). It counts the writes tried meanwhile.
type fullDisk struct {
	store.Store
	full  atomic.Bool
	tries atomic.Int64
}

func (f *fullDisk) fail() error {
	if !f.full.Load() {
		return nil
	}
	f.tries.Add(1)
	return errDiskFull
}

func (f *fullDisk) InsertTasks(ctx context.Context, t []store.TaskInsert) ([]store.InsertResult, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.Store.InsertTasks(ctx, t)
}

func (f *fullDisk) ClaimSteps(ctx context.Context, p store.ClaimParams) ([]store.ClaimedStep, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.Store.ClaimSteps(ctx, p)
}

func (f *fullDisk) ReleaseLease(ctx context.Context, engineID string, lease int64) (int, error) {
	if err := f.fail(); err != nil {
		return 0, err
	}
	return f.Store.ReleaseLease(ctx, engineID, lease)
}

func (f *fullDisk) CompleteSteps(ctx context.Context, o []store.Outcome) ([]error, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.Store.CompleteSteps(ctx, o)
}

func (f *fullDisk) Heartbeat(ctx context.Context, p store.HeartbeatParams) (store.HeartbeatResult, error) {
	if err := f.fail(); err != nil {
		return store.HeartbeatResult{}, err
	}
	return f.Store.Heartbeat(ctx, p)
}

func (f *fullDisk) Lead(ctx context.Context, engineID string, now time.Time, ttl time.Duration) (bool, error) {
	if err := f.fail(); err != nil {
		return false, err
	}
	return f.Store.Lead(ctx, engineID, now, ttl)
}

func (f *fullDisk) Reap(ctx context.Context, now, staleBefore time.Time, dead []string, engineID string) (int, error) {
	if err := f.fail(); err != nil {
		return 0, err
	}
	return f.Store.Reap(ctx, now, staleBefore, dead, engineID)
}

func (f *fullDisk) Expire(ctx context.Context, now time.Time, engineID string) (int, error) {
	if err := f.fail(); err != nil {
		return 0, err
	}
	return f.Store.Expire(ctx, now, engineID)
}

func (f *fullDisk) Promote(ctx context.Context, now time.Time, engineID string) (int, error) {
	if err := f.fail(); err != nil {
		return 0, err
	}
	return f.Store.Promote(ctx, now, engineID)
}

// TestFullDiskBacksOff fills the disk under a working engine: a step's
// outcome cannot be recorded, a retry cannot be promoted, claims and
// heartbeats fail. The engine's loops back off instead of spinning (the
// writes tried and the lines logged in a second stay few), /health/ready
// names the failing loops and the metrics say degraded; once the disk has
// room again the engine recovers by itself and the task completes.
func TestFullDiskBacksOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	disk := &fullDisk{Store: s}
	logs := &countingLog{}
	const poll = 10 * time.Millisecond
	// The heartbeat tries again every half interval while it fails (so
	// that an outage costs no lease): 20 a second at 100 ms.
	e := newEngine(t, disk, weft.Config{PollInterval: poll, HeartbeatInterval: 100 * time.Millisecond, LeaseTTL: 10 * time.Second, Logger: slog.New(logs)})
	release := make(chan struct{})
	started := make(chan struct{})
	e.Handle("block", func(ctx context.Context, a *weft.Attempt) (any, error) {
		close(started)
		if err := hold(ctx, release); err != nil {
			return nil, err
		}
		return "done", nil
	})
	var flakyRuns atomic.Int32
	e.Handle("flaky", func(ctx context.Context, a *weft.Attempt) (any, error) {
		if flakyRuns.Add(1) == 1 {
			return nil, errors.New("first attempt fails")
		}
		return "ok", nil
	})
	require.NoError(t, e.Register(ctx, workflow.New("disk", "full", "1").
		Step("block", "block").
		Step("flaky", "flaky", workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 3, Backoff: "fixed", Initial: workflow.Duration(300 * time.Millisecond)}))))
	start(t, e)
	srv, err := server.New(e, server.Options{DisableAuth: true, Logger: quietLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	sub, err := e.Submit(ctx, weft.Submission{Workflow: "disk/full"})
	require.NoError(t, err)
	<-started
	eventually(t, "the flaky step to wait for its retry", func() bool {
		task, err := s.GetTask(ctx, sub.Task.ID)
		require.NoError(t, err)
		for _, st := range task.Steps {
			if st.Name == "flaky" {
				return st.State == state.StepWaiting
			}
		}
		return false
	})

	// The disk fills: the blocked step's outcome cannot be written, nor the
	// flaky step's promotion when its retry comes due.
	disk.full.Store(true)
	close(release)
	failing := func() map[string]string { return e.Health().Failing }
	eventually(t, "every loop to report its failures", func() bool {
		f := failing()
		return f["claim"] != "" && f["heartbeat"] != "" && f["maintenance"] != "" && f["completer"] != ""
	})
	triesBefore, linesBefore := disk.tries.Load(), logs.total()
	const window = time.Second
	time.Sleep(window) // an observation window: what the loops do in it is measured
	tries, lines := disk.tries.Load()-triesBefore, logs.total()-linesBefore
	t.Logf("in %s with a full disk: %d writes tried, %d lines logged (%s)", window, tries, lines, logs.summary())
	// Without backoff the claim loop alone retried thousands of times a
	// second and the heartbeat logged every 10 ms.
	require.Less(t, tries, int64(80), "the loops spin on a full disk")
	require.Less(t, lines, 20, "every failed attempt is logged: %s", logs.summary())

	res, err := http.Get(hs.URL + "/health/ready")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "%s", body)
	for _, loop := range []string{"claim", "heartbeat", "maintenance", "completer"} {
		require.Contains(t, string(body), `"`+loop+`":"failing since`, "%s", body)
	}
	require.Contains(t, string(body), errDiskFull.Error())
	metrics := scrape(t, hs.URL)
	require.Contains(t, metrics, "weft_engine_degraded 1")
	require.Contains(t, metrics, `weft_engine_failing{check="completer"} 1`)
	require.NotContains(t, metrics, `weft_engine_errors_total{loop="claim"} 0`)

	// Room again: the engine recovers without help and finishes the task.
	disk.full.Store(false)
	task := wait(t, e, sub.Task.ID)
	require.Equal(t, state.TaskCompleted, task.State, task.Error)
	eventually(t, "the engine to be healthy again", func() bool { return !e.Health().Degraded })
	res, err = http.Get(hs.URL + "/health/ready")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, scrape(t, hs.URL), "weft_engine_degraded 0")
}

func scrape(t *testing.T, base string) string {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}

// failingHeartbeats is a store whose heartbeats fail while down is set,
// as during a database restart; beats counts those that passed.
type failingHeartbeats struct {
	store.Store
	down  atomic.Bool
	beats atomic.Int64
}

func (f *failingHeartbeats) Heartbeat(ctx context.Context, p store.HeartbeatParams) (store.HeartbeatResult, error) {
	if f.down.Load() {
		return store.HeartbeatResult{}, store.ErrUnavailable
	}
	res, err := f.Store.Heartbeat(ctx, p)
	if err == nil {
		f.beats.Add(1)
	}
	return res, err
}

// TestOutageShorterThanTheLease: an engine whose heartbeats fail for most
// of its lease (the database restarting) renews it as soon as they pass
// again, before the lease lapses: another engine, reaping, never takes its
// running step, which runs once. Before, a heartbeat that failed tried
// again only at a tick after its backoff (here at 4.5 s), and lost the
// lease.
func TestOutageShorterThanTheLease(t *testing.T) {
	t.Parallel()
	s := backends()["sqlite"](t)
	flaky := &failingHeartbeats{Store: s}
	const every, lease, outage = 900 * time.Millisecond, 4 * time.Second, 2900 * time.Millisecond
	held := newEngine(t, flaky, weft.Config{HeartbeatInterval: every, LeaseTTL: lease, PollInterval: time.Second})
	var runs atomic.Int32
	release, started := make(chan struct{}), make(chan struct{}, 1)
	held.Handle("long", func(ctx context.Context, a *weft.Attempt) (any, error) {
		runs.Add(1)
		started <- struct{}{}
		return "done", hold(ctx, release)
	})
	register(t, held, workflow.New("outage", "long", "1").Step("s", "long"))
	start(t, held)
	sub := submit(t, held, weft.Submission{Workflow: "outage/long"})
	<-started
	reaper := newEngine(t, s, weft.Config{HeartbeatInterval: every, LeaseTTL: lease, PollInterval: 50 * time.Millisecond, LeaderTTL: 300 * time.Millisecond})
	reaper.Handle("long", func(ctx context.Context, a *weft.Attempt) (any, error) {
		runs.Add(1)
		return "again", nil
	})
	start(t, reaper)

	// Down from just after a renewal, for most of the lease.
	beats := flaky.beats.Load()
	eventually(t, "a heartbeat", func() bool { return flaky.beats.Load() > beats })
	flaky.down.Store(true)
	<-time.After(outage)
	flaky.down.Store(false)
	// Past the lease from the outage's start: a lapsed lease is reaped by
	// now.
	<-time.After(lease - outage + 2*every)
	close(release)
	task := wait(t, held, sub.Task.ID)
	require.Equal(t, state.TaskCompleted, task.State)
	require.Equal(t, int32(1), runs.Load(), "the step ran again elsewhere: the outage cost the lease")
	require.Equal(t, 1, task.Steps[0].Attempts)
}
