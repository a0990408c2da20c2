package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/weftrun/weft/internal/dag"
)

// ErrInvalidInsert reports a TaskInsert that no backend may write.
var ErrInvalidInsert = errors.New("invalid task insert")

// CompareVersions orders workflow versions: dot-separated parts compare
// numerically when both are numbers and lexically otherwise, so 1.10 is newer
// than 1.9. It returns -1, 0 or 1.
func CompareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) || i < len(pb); i++ {
		var x, y string
		if i < len(pa) {
			x = pa[i]
		}
		if i < len(pb) {
			y = pb[i]
		}
		nx, ex := strconv.Atoi(x)
		ny, ey := strconv.Atoi(y)
		switch {
		case ex == nil && ey == nil && nx != ny:
			if nx < ny {
				return -1
			}
			return 1
		case (ex != nil || ey != nil) && x != y:
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// ValidateInsert checks what every backend relies on before writing a task:
// its identity, JSON input, and dependency indexes that point at earlier or
// later steps of the same task but never at the step itself or outside it.
func ValidateInsert(in TaskInsert) error {
	if in.Namespace == "" || in.Workflow == "" || in.Version == "" {
		return fmt.Errorf("task insert: namespace, workflow and version are required: %w", ErrInvalidInsert)
	}
	if len(in.Steps) == 0 {
		return fmt.Errorf("task insert for %s/%s: no steps: %w", in.Namespace, in.Workflow, ErrInvalidInsert)
	}
	if (in.LimitKey != "") != (in.Limit > 0) {
		return fmt.Errorf("task insert for %s/%s: a task needs both a limit key and a limit of at least 1, or neither: %w", in.Namespace, in.Workflow, ErrInvalidInsert)
	}
	if len(in.Input) > 0 && !json.Valid(in.Input) {
		return fmt.Errorf("task insert for %s/%s: input is not valid JSON: %w", in.Namespace, in.Workflow, ErrInvalidInsert)
	}
	for i, s := range in.Steps {
		if s.Name == "" || (s.Handler == "" && s.Kind != KindSignal) {
			return fmt.Errorf("task insert for %s/%s: step %d needs a name and a handler: %w", in.Namespace, in.Workflow, i, ErrInvalidInsert)
		}
		switch {
		case s.Kind == KindSignal && s.Handler != "" && s.Handler != SignalHandler:
			return fmt.Errorf("task insert for %s/%s: signal step %q has handler %q: it takes %q or none: %w", in.Namespace, in.Workflow, s.Name, s.Handler, SignalHandler, ErrInvalidInsert)
		case s.Kind != KindSignal && s.Handler == SignalHandler:
			return fmt.Errorf("task insert for %s/%s: step %q: handler %q is the engine's, for signal steps alone: %w", in.Namespace, in.Workflow, s.Name, s.Handler, ErrInvalidInsert)
		}
		if !dag.ValidRule(dag.Rule(s.TriggerRule)) {
			return fmt.Errorf("task insert for %s/%s: step %q has unknown trigger rule %q: %w", in.Namespace, in.Workflow, s.Name, s.TriggerRule, ErrInvalidInsert)
		}
		if s.Timeout < 0 {
			return fmt.Errorf("task insert for %s/%s: step %q has negative timeout %s: %w", in.Namespace, in.Workflow, s.Name, s.Timeout, ErrInvalidInsert)
		}
		if (s.LimitKey != "") != (s.Limit > 0) {
			return fmt.Errorf("task insert for %s/%s: step %q needs both a limit key and a limit of at least 1, or neither: %w", in.Namespace, in.Workflow, s.Name, ErrInvalidInsert)
		}
		if (s.RateKey != "") != !s.Rate.IsZero() {
			return fmt.Errorf("task insert for %s/%s: step %q needs both a rate key and a rate, or neither: %w", in.Namespace, in.Workflow, s.Name, ErrInvalidInsert)
		}
		if err := s.Rate.Validate(); err != nil {
			return fmt.Errorf("task insert for %s/%s: step %q: %w: %w", in.Namespace, in.Workflow, s.Name, err, ErrInvalidInsert)
		}
		if s.Breaker != nil {
			if err := s.Breaker.Validate(); err != nil {
				return fmt.Errorf("task insert for %s/%s: step %q: %w: %w", in.Namespace, in.Workflow, s.Name, err, ErrInvalidInsert)
			}
		}
		switch s.Kind {
		case "", KindDecision, KindBatch, KindSignal, KindWorkflow, KindFunction:
		default:
			return fmt.Errorf("task insert for %s/%s: step %q has unknown kind %q: %w", in.Namespace, in.Workflow, s.Name, s.Kind, ErrInvalidInsert)
		}
		for _, d := range s.Deps {
			if d < 0 || d >= len(in.Steps) || d == i {
				return fmt.Errorf("task insert for %s/%s: step %q has dependency index %d out of range: %w", in.Namespace, in.Workflow, s.Name, d, ErrInvalidInsert)
			}
		}
	}
	return nil
}

// ErrInvalid reports input that is not valid: a workflow definition, a
// submission, a signal or a request. The engine and the API wrap it with
// what was wrong and where.
var ErrInvalid = errors.New("invalid")

// FieldError is an ErrInvalid about one field of a request, with the
// problem: the API answers it 400 invalid_field naming the field, the CLI
// exit status 2 naming its flag. Find it with errors.As; errors.Is(err,
// ErrInvalid) holds for it too.
type FieldError struct {
	Field   string // as the API names it: "concurrency", "tags", "on_conflict"
	Problem string // "must be from 0 to 10, got 11"
}

// Invalidf returns a FieldError about field, its problem formatted as
// fmt.Sprintf does.
func Invalidf(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

func (e *FieldError) Error() string { return ErrInvalid.Error() + " " + e.Field + ": " + e.Problem }

// Is makes a FieldError an ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// MaxReason is the longest reason an operator may give for an action, in
// bytes.
const MaxReason = 4096

// CheckReason checks the reason an operator gives for an action (a
// cancel, a retry, a pause): at most MaxReason bytes of UTF-8 text without
// a NUL character, which no store keeps. Every action checks it, however
// it is reached.
func CheckReason(reason string) error {
	switch {
	case len(reason) > MaxReason:
		return Invalidf("reason", "must be at most %d bytes, got %d", MaxReason, len(reason))
	case !utf8.ValidString(reason):
		return Invalidf("reason", "must be UTF-8 text")
	case strings.ContainsRune(reason, 0):
		return Invalidf("reason", "must not hold a NUL character")
	}
	return nil
}

// ConflictError is an ErrConflict with its reason: the change does not
// fit the current state ("task 7 is completed and cannot be cancelled").
// The API answers it 409 conflict with the reason as its message, the CLI
// prints the reason. Find it with errors.As; errors.Is(err, ErrConflict)
// holds for it too.
type ConflictError struct {
	Reason string
}

// Conflictf returns a ConflictError, its reason formatted as fmt.Sprintf
// does.
func Conflictf(format string, args ...any) *ConflictError {
	return &ConflictError{Reason: fmt.Sprintf(format, args...)}
}

func (e *ConflictError) Error() string { return e.Reason + ": " + ErrConflict.Error() }

// Is makes a ConflictError an ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// ErrRefused wraps an error by which the database refused a statement for
// what it carries or does (a value it cannot store, a constraint, a limit):
// the same write would be refused again, so it must not be retried as is.
// Any other error of a store (a lost connection, a deadlock, a timeout, too
// many connections) may pass, and the write can be tried again.
var ErrRefused = errors.New("refused by the database")

// Refused marks err, an error by which the database refused a statement,
// as ErrRefused, keeping its message.
func Refused(err error) error {
	if err == nil || errors.Is(err, ErrRefused) {
		return err
	}
	return refusedError{err}
}

type refusedError struct{ err error }

func (e refusedError) Error() string   { return e.err.Error() }
func (e refusedError) Unwrap() []error { return []error{e.err, ErrRefused} }
