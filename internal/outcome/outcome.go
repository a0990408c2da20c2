// Package outcome defines the errors by which a handler asks for something
// other than a plain retryable failure: no retry at all, a retry after a
// given delay, or a snooze that gives its attempt back. The public
// constructors are weft.Permanent, weft.RetryAfter and weft.Snooze.
package outcome

import (
	"errors"
	"fmt"
	"time"
)

// PermanentError fails the step at once, whatever its retry policy says.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + errString(e.Err) }
func (e *PermanentError) Unwrap() error { return e.Err }

// RetryAfterError fails the attempt and asks for the next one after Delay
// instead of the policy's backoff (still bounded by max attempts).
type RetryAfterError struct {
	Err   error
	Delay time.Duration
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %s", e.Delay, errString(e.Err))
}
func (e *RetryAfterError) Unwrap() error { return e.Err }

// SnoozeError ends the attempt without failing it: the step waits durably
// for Delay and then runs again with the same attempt number.
type SnoozeError struct {
	Delay  time.Duration
	Reason string // why, where the handler said (a remote worker's report)
}

func (e *SnoozeError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s (snoozed for %s)", e.Reason, e.Delay)
	}
	return fmt.Sprintf("snoozed for %s", e.Delay)
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// IsPermanent reports whether err asks for no retry.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}
