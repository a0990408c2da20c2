package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/wire/weftv1"
)

// This file is what a GRPCWorker's handler sees and says: its context
// (Checkpoint, Progress, why it ended) and how its errors are reported
// (Permanent, RetryAfter, Snooze).

// StepHandler runs one step a remote worker was given: its JSON result
// (nil for null), or an error, which fails the attempt (retried under the
// step's policy unless it is Permanent).
type StepHandler func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error)

// permanentError is a failure that must not be retried.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks a handler's error as permanent: the step fails without
// another attempt.
func Permanent(err error) error { return permanentError{err} }

// retryAfterError is a failure to retry after a delay of its own.
type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e retryAfterError) Error() string { return e.err.Error() }
func (e retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks a handler's error as one to retry after d instead of
// the step's backoff (its max attempts still apply).
func RetryAfter(d time.Duration, err error) error { return retryAfterError{err, d} }

// snoozeError says the step is not done yet.
type snoozeError struct {
	reason string
	delay  time.Duration
}

func (e snoozeError) Error() string { return e.reason }

// Snooze is what a handler returns when its step is not done yet, and that
// is no failure: the step runs again after d (up to a week) with the same
// attempt number. reason says why.
func Snooze(d time.Duration, reason string) error { return snoozeError{reason, d} }

// stepTimedOut is the cause of a step's context whose timeout passed.
type stepTimedOut time.Duration

func (d stepTimedOut) Error() string { return fmt.Sprintf("step timed out after %s", time.Duration(d)) }

// ErrPreempted is the cause of a step's context that the server asked to
// stop for a step of higher priority (a preemptible step, on a worker with
// no free slot). A handler that returns an error then is reported
// preempted: the step goes back to ready with its checkpoint, without using
// an attempt; one that returns a result anyway completes.
var ErrPreempted = errors.New("preempted by a step of higher priority")

// attemptKey carries, in a handler's context, the attempt it runs, for
// Checkpoint and Progress.
type attemptKey struct{}

type attemptRef struct {
	w      *GRPCWorker
	fence  *weftv1.Fence
	worker string // the registration the step was pushed to
}

func attemptOf(ctx context.Context) (attemptRef, error) {
	a, ok := ctx.Value(attemptKey{}).(attemptRef)
	if !ok {
		return a, errors.New("not a step's context: call it with the context a GRPCWorker handler was given")
	}
	return a, nil
}

// ended refuses, without a request, a call of an attempt whose context
// ended. A step whose timeout passed or that the server took back is no
// longer the attempt's: a conflict (stale_lease), as the server's answer
// would be.
func (a attemptRef) ended(ctx context.Context, what string) error {
	if ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(ctx)
	var timedOut stepTimedOut
	if errors.As(cause, &timedOut) || errors.Is(cause, errStepLost) {
		return &Error{Status: http.StatusConflict, Code: wire.CodeStaleLease,
			Message: fmt.Sprintf("%s of step %d attempt %d not sent: %v", what, a.fence.GetStepId(), a.fence.GetAttempt(), cause)}
	}
	return fmt.Errorf("%s of step %d attempt %d not sent: %w", what, a.fence.GetStepId(), a.fence.GetAttempt(), cause)
}

// Checkpoint saves v, encoded as JSON, as the step's checkpoint: a later
// attempt of the step is given it (wire.ClaimedStep.Checkpoint). Call it
// with the context the handler was given. It is fenced: refused (with a
// conflict) once this attempt no longer holds the step, by the worker
// itself once the handler's context ended (the step's timeout passed, or
// the server took the step back).
func Checkpoint(ctx context.Context, v any) error {
	a, err := attemptOf(ctx)
	if err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := a.ended(ctx, "checkpoint"); err != nil {
		return err
	}
	return a.w.retrying(ctx, func() error {
		_, err := a.w.api.Checkpoint(ctx, request(ctx, &weftv1.CheckpointRequest{WorkerId: a.worker, Fence: a.fence, Checkpoint: b}, a.w.cfg.Token))
		return err
	})
}

// Progress reports how far the handler got: fraction from 0 to 1 and an
// optional message, shown as the step's progress by the API and the
// dashboard. Call it with the context the handler was given.
func Progress(ctx context.Context, fraction float64, message string) error {
	if !(fraction >= 0 && fraction <= 1) {
		return fmt.Errorf("progress: fraction must be from 0 to 1, got %v", fraction)
	}
	a, err := attemptOf(ctx)
	if err != nil {
		return err
	}
	if err := a.ended(ctx, "progress"); err != nil {
		return err
	}
	return a.w.retrying(ctx, func() error {
		_, err := a.w.api.Progress(ctx, request(ctx, &weftv1.ProgressRequest{WorkerId: a.worker, Fence: a.fence, Fraction: &fraction,
			Message: message}, a.w.cfg.Token))
		return err
	})
}

// retrying calls fn until it succeeds, fails for a reason that trying again
// does not change, or three tries failed; it returns fn's last error as the
// API's (*Error where the server answered).
func (w *GRPCWorker) retrying(ctx context.Context, fn func() error) error {
	backoff := w.cfg.MinBackoff
	for try := 1; ; try++ {
		err := fn()
		switch connect.CodeOf(err) {
		case connect.CodeUnavailable, connect.CodeResourceExhausted, connect.CodeDeadlineExceeded, connect.CodeUnknown, connect.CodeInternal:
			if err != nil && try < 3 && ctx.Err() == nil {
				backoff = w.sleep(ctx, backoff)
				continue
			}
		}
		return grpcError(err)
	}
}

// failRequest is the report of a handler's error: permanent, retried after
// a delay of its own, snoozed, or retried under the step's policy.
func failRequest(id string, fence *weftv1.Fence, herr error, preempted bool) *weftv1.FailRequest {
	req := &weftv1.FailRequest{WorkerId: id, Fence: fence, Error: herr.Error(), Preempted: preempted}
	if preempted {
		return req
	}
	var perm permanentError
	var after retryAfterError
	var snooze snoozeError
	const week = 7 * 24 * time.Hour
	switch {
	case errors.As(herr, &perm):
		req.Permanent = true
	case errors.As(herr, &after):
		req.RetryAfterMs = min(max(after.delay, 0), week).Milliseconds()
	case errors.As(herr, &snooze):
		// At least 1 ms: a snooze_ms of 0 would be a plain failure.
		req.SnoozeMs = min(max(snooze.delay, time.Millisecond), week).Milliseconds()
		if req.Error == "" {
			req.Error = "snoozed"
		}
	}
	return req
}
