// Package health keeps an engine's own view of its work: which of its
// loops fail on the store, since when, and whether its database file is
// still the one it opened. It serves readiness and metrics, and tells the
// loops how long to back off.
package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/jitter"
	"github.com/weftrun/weft/store"
)

// The engine's loops, as health and metrics name them.
const (
	LoopClaim       = "claim"
	LoopHeartbeat   = "heartbeat"
	LoopMaintenance = "maintenance"
	LoopCompleter   = "completer"
	// CheckDatabaseFile is the check that the database the store opened is
	// still the one at its path (a SQLite file deleted or replaced).
	CheckDatabaseFile = "database_file"
)

// maxBackoff caps the wait of a loop whose store calls keep failing.
const maxBackoff = 30 * time.Second

// Health is a snapshot of the engine's own view of its work: which loops
// fail on the store and which checks fail, for readiness and metrics.
type Health struct {
	// Degraded is set when any loop fails persistently or a check fails.
	Degraded bool
	// Failing names each failing loop or check with its last error.
	Failing map[string]string
	// Errors counts, by loop, the store calls that failed since the
	// engine started.
	Errors map[string]uint64
}

// Monitor records the failures of an engine's loops and the verdict of
// its database file check.
type Monitor struct {
	log  *slog.Logger
	poll time.Duration
	// id is the engine's id, for the log (it changes when the engine
	// registers again).
	id func() string
	// file, when the store can tell, checks that the database is still
	// the one it opened.
	file store.FileChecker

	// mu guards the loops' failure records and the file check's verdict.
	mu         sync.Mutex
	loopStates map[string]*loopState
	errCounts  map[string]uint64
	fileErr    error // set once the database was deleted or replaced
}

// New returns the monitor of an engine on s whose loops poll every poll
// and whose id is id().
func New(s any, log *slog.Logger, poll time.Duration, id func() string) *Monitor {
	m := &Monitor{log: log, poll: poll, id: id}
	m.file, _ = s.(store.FileChecker)
	return m
}

// loopState is one loop's run of failures.
type loopState struct {
	failures int // consecutive
	since    time.Time
	err      error
}

// Health returns the engine's health.
func (m *Monitor) Health() Health {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := Health{Failing: map[string]string{}, Errors: maps.Clone(m.errCounts)}
	if h.Errors == nil {
		h.Errors = map[string]uint64{}
	}
	for loop, st := range m.loopStates {
		if st.failures > 0 {
			h.Failing[loop] = fmt.Sprintf("failing since %s (%d attempts): %v", st.since.UTC().Format(time.RFC3339), st.failures, st.err)
		}
	}
	if m.fileErr != nil {
		h.Failing[CheckDatabaseFile] = m.fileErr.Error()
	}
	h.Degraded = len(h.Failing) > 0
	return h
}

// Failed records a failed store call of a loop and returns how long the
// loop waits before it tries again: the poll interval doubled at each
// consecutive failure, capped at maxBackoff (or 32 poll intervals if that
// is less), with jitter. The failure is logged at the first attempt and then
// whenever the count of consecutive failures doubles, so a database that
// stays down costs a few log lines, not one per attempt.
func (m *Monitor) Failed(ctx context.Context, loop, what string, err error) time.Duration {
	return m.FailedWithin(ctx, loop, what, err, 0)
}

// FailedWithin is Failed for a loop that waits at most limit (0: no limit
// of its own) after a failure: the wait it returns and logs is capped.
func (m *Monitor) FailedWithin(ctx context.Context, loop, what string, err error, limit time.Duration) time.Duration {
	if ctx.Err() != nil {
		return 0
	}
	m.mu.Lock()
	if m.loopStates == nil {
		m.loopStates, m.errCounts = map[string]*loopState{}, map[string]uint64{}
	}
	st := m.loopStates[loop]
	if st == nil {
		st = &loopState{}
		m.loopStates[loop] = st
	}
	if st.failures == 0 {
		st.since = time.Now()
	}
	st.failures++
	st.err = err
	m.errCounts[loop]++
	n := st.failures
	m.mu.Unlock()
	wait := Backoff(m.poll, n)
	if limit > 0 {
		wait = min(wait, limit)
	}
	if n&(n-1) == 0 { // 1, 2, 4, 8, …
		m.log.Error(what+" failed", "engine_id", m.id(), "loop", loop, "failures", n, "retry_in", wait.Round(time.Millisecond), "error", err)
	}
	return wait
}

// Backoff is the wait after n consecutive failures: base doubled n-1
// times, capped.
func Backoff(base time.Duration, n int) time.Duration {
	limit := min(maxBackoff, 32*base)
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return jitter.Of(max(min(d, limit), time.Millisecond))
}

// Succeeded ends a loop's run of failures.
func (m *Monitor) Succeeded(loop string) {
	m.mu.Lock()
	st := m.loopStates[loop]
	if st == nil || st.failures == 0 {
		m.mu.Unlock()
		return
	}
	n, since := st.failures, st.since
	st.failures, st.err = 0, nil
	m.mu.Unlock()
	m.log.Info("store calls succeed again", "engine_id", m.id(), "loop", loop, "failures", n, "outage_ms", time.Since(since).Milliseconds())
}

// DatabaseGone returns why the engine refuses work, once CheckFile found
// its database deleted or replaced; nil before. It costs a lock, not a
// look at the file: the claim and submit paths ask it.
func (m *Monitor) DatabaseGone() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fileErr
}

// CheckFile asks a store that can tell whether its database is still the
// one it opened; the maintenance loop asks at every tick (every poll
// interval), on every engine. Once it is not, the engine refuses work for
// good: writing on would write into a file nobody else sees.
func (m *Monitor) CheckFile() error {
	if m.file == nil {
		return nil
	}
	if gone := m.DatabaseGone(); gone != nil {
		return gone
	}
	err := m.file.CheckFile()
	if err == nil {
		return nil
	}
	if !errors.Is(err, store.ErrDatabaseGone) {
		return nil // could not tell (a stat failed): ask again next time
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fileErr == nil {
		// Said before the refusal shows: whoever sees it (health, a
		// refused submission) finds it logged.
		m.log.Error("refusing work: the database was deleted or replaced since it was opened; restart the engine", "engine_id", m.id(), "error", err)
		m.fileErr = err
	}
	return err
}
