package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/weftrun/weft/internal/textsafe"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// Error codes of the API (see package wire, where they are defined for the
// server and its clients alike).
const (
	CodeInvalidJSON      = wire.CodeInvalidJSON
	CodeUnknownField     = wire.CodeUnknownField
	CodeInvalidField     = wire.CodeInvalidField
	CodeBodyTooLarge     = wire.CodeBodyTooLarge
	CodeUnauthenticated  = wire.CodeUnauthenticated
	CodeForbidden        = wire.CodeForbidden
	CodeNotFound         = wire.CodeNotFound
	CodeConflict         = wire.CodeConflict
	CodeStaleLease       = wire.CodeStaleLease
	CodeWorkerLost       = wire.CodeWorkerLost
	CodeOverloaded       = wire.CodeOverloaded
	CodeTimeout          = wire.CodeTimeout
	CodeUnavailable      = wire.CodeUnavailable
	CodeInternal         = wire.CodeInternal
	CodeInvalidWorkflow  = wire.CodeInvalidWorkflow
	CodeMethodNotAllowed = wire.CodeMethodNotAllowed
)

// apiError is an error with its HTTP status, code and, when one field is at
// fault, its name.
type apiError struct {
	Status  int
	Code    string
	Message string
	Field   string
	// Problems lists a template's problems one by one (invalid_workflow).
	Problems []wire.Problem
	// header is sent with the answer (Allow with a 405).
	header http.Header
	cause  error
}

func (e *apiError) Error() string { return e.Message }
func (e *apiError) Unwrap() error { return e.cause }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func fieldError(field, format string, args ...any) *apiError {
	e := errorf(http.StatusBadRequest, CodeInvalidField, format, args...)
	e.Field = field
	e.Message = field + ": " + e.Message
	return e
}

// inField answers err, an error that holds a store.FieldError, naming
// field: the request's name for what the engine or store checked under its
// own ("filter.tags" for "tags"). Any other error is answered as it is.
func inField(field string, err error) *apiError {
	var fe *store.FieldError
	if !errors.As(err, &fe) {
		return toAPIError(err)
	}
	e := fieldError(field, "%s", fe.Problem)
	e.cause = err
	return e
}

// toAPIError maps an error from the engine or store to its response.
func toAPIError(err error) *apiError {
	var ae *apiError
	var fe *store.FieldError
	var ce *store.ConflictError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &fe):
		return inField(fe.Field, err)
	case errors.Is(err, store.ErrNotFound):
		return &apiError{Status: http.StatusNotFound, Code: CodeNotFound, Message: err.Error(), cause: err}
	case errors.Is(err, store.ErrStaleLease):
		return &apiError{Status: http.StatusConflict, Code: CodeStaleLease, Message: err.Error(), cause: err}
	case errors.Is(err, store.ErrEngineLost):
		return &apiError{Status: http.StatusConflict, Code: CodeWorkerLost, Message: "the worker is not registered or was declared dead: register again", cause: err}
	case errors.As(err, &ce):
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Message: ce.Reason, cause: err}
	case errors.Is(err, store.ErrConflict):
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Message: err.Error(), cause: err}
	case errors.Is(err, store.ErrInvalid):
		return &apiError{Status: http.StatusBadRequest, Code: CodeInvalidField, Message: err.Error(), cause: err}
	case errors.Is(err, store.ErrContended):
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the database is busy with conflicting changes: retry later", cause: err}
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, store.ErrDatabaseGone):
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the database is unavailable: retry later", cause: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeTimeout, Message: "the request timed out", cause: err}
	default:
		return &apiError{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error", cause: err}
	}
}

// decode reads a JSON body into v: unknown fields, wrong types, trailing
// data and oversize bodies are errors naming what is wrong. So is a string
// anywhere in the body, in a field of text or inside a field of JSON, that
// no store can keep (invalid_field naming the field, as in "input.name"): one
// with a NUL character (\u0000), bytes that are not UTF-8, or an escape of a
// lone UTF-16 surrogate. Every route that takes a body decodes it here, so
// none passes such a value on to the engine and the database; only a
// worker's outcome is decoded by decodeOutcome.
func decode(r *http.Request, v any) error {
	return decodeBody(r, v, true)
}

// decodeOutcome is decode without the check for strings no store can
// keep: a remote worker's result and error text go to the engine as they
// are, which ends the step the way it ends the same bytes from a handler of
// its own (the error text sanitized, a result that cannot be stored failing
// the step for good). Refusing them would leave the step to be reclaimed
// and run again, without end.
func decodeOutcome(r *http.Request, v any) error {
	return decodeBody(r, v, false)
}

func decodeBody(r *http.Request, v any, checkText bool) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return decodeError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return decodeError(err)
		}
		// Which value, by its whole path: encoding/json's errors name
		// no array index, and none at all for some.
		if f, ok := locateFault(body, reflect.TypeOf(v)); ok {
			return f.apiError()
		}
		return decodeError(err)
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "the body holds more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "the body holds data after its JSON value")
	}
	if !checkText {
		return nil
	}
	if path, err := textsafe.Find(body); err != nil {
		if path == "" {
			return errorf(http.StatusBadRequest, CodeInvalidJSON, "the body %v", err)
		}
		return fieldError(path, "%v", err)
	}
	return nil
}

// decodeError describes an error reading or decoding a body.
func decodeError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "the body is larger than %d bytes", tooBig.Limit)
	case errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "the body is empty: a JSON object is expected")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "the body is truncated JSON")
	case errors.As(err, &syntax):
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "the body is not valid JSON at byte %d: %v", syntax.Offset, err)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return errorf(http.StatusBadRequest, CodeInvalidJSON, "the body must be %s", typeName(typ))
		}
		e := fieldError(field, "must be %s, got %s", typeName(typ), typ.Value)
		return e
	default:
		// encoding/json gives an unknown field as text only, `json:
		// unknown field "colour"`: the one error read as text here.
		if q, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field := strings.Trim(q, `"`)
			return &apiError{Status: http.StatusBadRequest, Code: CodeUnknownField, Field: field, Message: fmt.Sprintf("%s: unknown field", field)}
		}
		// Errors from a field's own UnmarshalJSON (times, fences).
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "%v", err)
	}
}

func typeName(e *json.UnmarshalTypeError) string {
	switch e.Type.Kind().String() {
	case "int", "int64", "int32", "uint", "uint64":
		return "an integer"
	case "float64", "float32":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "map", "struct":
		return "an object"
	}
	return e.Type.String()
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v == nil {
		return
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// writeError writes an error response.
func writeError(w http.ResponseWriter, e *apiError) {
	for k, v := range e.header {
		w.Header()[k] = v
	}
	writeJSON(w, e.Status, wire.ErrorBody{Error: wire.Error{Code: e.Code, Message: e.Message, Field: e.Field, Problems: e.Problems}})
}

// checkText refuses, as decode does for a JSON body, a request of another
// transport (a gRPC message converted to its wire type) holding a string
// that no store can keep, naming the field as the JSON body would (after
// prefix, which names the request within its message: "tasks[2]."). Fields
// of JSON (json.RawMessage) must hold JSON.
func checkText(prefix string, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "the request is not valid: %v", err)
	}
	if path, err := textsafe.Find(body); err != nil {
		if path == "" {
			return errorf(http.StatusBadRequest, CodeInvalidJSON, "the request %v", err)
		}
		return fieldError(prefix+path, "%v", err)
	}
	return nil
}

// checkJSON refuses a field of JSON that does not hold JSON.
func checkJSON(field string, v json.RawMessage) error {
	if len(v) > 0 && !json.Valid(v) {
		return fieldError(field, "must be JSON")
	}
	return nil
}
