package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

// loopState is one loop's run of failures.
type loopState struct {
	failures int // consecutive
	since    time.Time
	err      error
}

// Health returns the engine's health.
func (e *Engine) Health() Health {
	e.healthMu.Lock()
	defer e.healthMu.Unlock()
	h := Health{Failing: map[string]string{}, Errors: maps.Clone(e.errCounts)}
	if h.Errors == nil {
		h.Errors = map[string]uint64{}
	}
	for loop, st := range e.loopStates {
		if st.failures > 0 {
			h.Failing[loop] = fmt.Sprintf("failing since %s (%d attempts): %v", st.since.UTC().Format(time.RFC3339), st.failures, st.err)
		}
	}
	if e.fileErr != nil {
		h.Failing[CheckDatabaseFile] = e.fileErr.Error()
	}
	h.Degraded = len(h.Failing) > 0
	return h
}

// failed records a failed store call of a loop and returns how long the
// loop waits before it tries again: the poll interval doubled at each
// consecutive failure, capped at maxBackoff (or 32 poll intervals if that
// is less), with jitter. The failure is logged at the first attempt and then
// whenever the count of consecutive failures doubles, so a database that
// stays down costs a few log lines, not one per attempt.
func (e *Engine) failed(ctx context.Context, loop, what string, err error) time.Duration {
	if ctx.Err() != nil {
		return 0
	}
	e.healthMu.Lock()
	if e.loopStates == nil {
		e.loopStates, e.errCounts = map[string]*loopState{}, map[string]uint64{}
	}
	st := e.loopStates[loop]
	if st == nil {
		st = &loopState{}
		e.loopStates[loop] = st
	}
	if st.failures == 0 {
		st.since = time.Now()
	}
	st.failures++
	st.err = err
	e.errCounts[loop]++
	n := st.failures
	e.healthMu.Unlock()
	wait := backoff(e.cfg.PollInterval, n)
	if n&(n-1) == 0 { // 1, 2, 4, 8, …
		e.log.Error(what+" failed", "engine_id", e.ID(), "loop", loop, "failures", n, "retry_in", wait.Round(time.Millisecond), "error", err)
	}
	return wait
}

// backoff is the wait after n consecutive failures: base doubled n-1
// times, capped.
func backoff(base time.Duration, n int) time.Duration {
	limit := min(maxBackoff, 32*base)
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return jitter.Of(max(min(d, limit), time.Millisecond))
}

// succeeded ends a loop's run of failures.
func (e *Engine) succeeded(loop string) {
	e.healthMu.Lock()
	st := e.loopStates[loop]
	if st == nil || st.failures == 0 {
		e.healthMu.Unlock()
		return
	}
	n, since := st.failures, st.since
	st.failures, st.err = 0, nil
	e.healthMu.Unlock()
	e.log.Info("store calls succeed again", "engine_id", e.ID(), "loop", loop, "failures", n, "outage_ms", time.Since(since).Milliseconds())
}

// databaseGone returns why the engine refuses work, once checkFile found
// its database deleted or replaced; nil before. It costs a lock, not a
// look at the file: the claim and submit paths ask it.
func (e *Engine) databaseGone() error {
	e.healthMu.Lock()
	defer e.healthMu.Unlock()
	return e.fileErr
}

// checkFile asks a store that can tell whether its database is still the
// one it opened; the maintenance loop asks at every tick (every poll
// interval), on every engine. Once it is not, the engine refuses work for
// good: writing on would write into a file nobody else sees.
func (e *Engine) checkFile() error {
	fc, ok := e.store.(store.FileChecker)
	if !ok {
		return nil
	}
	if gone := e.databaseGone(); gone != nil {
		return gone
	}
	err := fc.CheckFile()
	if err == nil {
		return nil
	}
	if !errors.Is(err, store.ErrDatabaseGone) {
		return nil // could not tell (a stat failed): ask again next time
	}
	e.healthMu.Lock()
	defer e.healthMu.Unlock()
	if e.fileErr == nil {
		// Said before the refusal shows: whoever sees it (health, a
		// refused submission) finds it logged.
		e.log.Error("refusing work: the database was deleted or replaced since it was opened; restart the engine", "engine_id", e.ID(), "error", err)
		e.fileErr = err
	}
	return err
}
