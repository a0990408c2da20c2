// Package builtin implements the handlers weft ships with: "exec", which runs
// a command, and "http", which calls a URL. Both see a step attempt as a
// Request and report failures with the errors of package outcome: a
// PermanentError when retrying cannot help, a RetryAfterError when the other
// side said when to come back, and a plain error otherwise.
//
// Both handlers describe the attempt with the same JSON object, the step
// context:
//
//	{"task_id": 1, "step": "charge", "attempt": 1, "input": {...},
//	 "deps": {"reserve": {...}}, "config": {...}, "checkpoint": null}
//
// and, for an item of a batch, "batch": the item.
//
// exec writes it to the command's stdin; http sends it as the default body of
// POST, PUT and PATCH requests and executes its url and body templates with
// it.
package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/template"
	"unicode/utf8"

	"github.com/weftrun/weft/internal/textsafe"
)

// Request is what a built-in handler sees of one step attempt.
type Request struct {
	// TaskID identifies the task the step belongs to.
	TaskID int64
	// Step is the step's name.
	Step string
	// Attempt counts the attempts of the step, 1 for the first.
	Attempt int
	// Input is the task input; nil is treated as {}.
	Input json.RawMessage
	// Deps holds the results of the step's dependencies by step name.
	Deps map[string]json.RawMessage
	// Config is the step's static config.
	Config json.RawMessage
	// Checkpoint is the last checkpoint the step saved, or nil.
	Checkpoint json.RawMessage
	// Batch is the item of a batch the step works on, or nil.
	Batch json.RawMessage
	// Report, if set, receives what the command reports on its control
	// channel (see Exec): checkpoints and progress.
	Report Reporter
	// Secrets resolves the ${secret:NAME} references of the config; nil:
	// a step that names a secret fails.
	Secrets SecretLookup
	// Guard kills an exec step's process group when the engine dies; nil:
	// only the parent-death signal (Linux) kills the command itself.
	Guard *Guard
}

// Reporter receives a running step's checkpoints and progress.
type Reporter interface {
	SaveCheckpoint(ctx context.Context, checkpoint json.RawMessage) error
	Progress(ctx context.Context, fraction float64, message string) error
}

// stepContext is the JSON shape of the step context, in a fixed key order.
type stepContext struct {
	TaskID     int64                      `json:"task_id"`
	Step       string                     `json:"step"`
	Attempt    int                        `json:"attempt"`
	Input      json.RawMessage            `json:"input"`
	Deps       map[string]json.RawMessage `json:"deps"`
	Config     json.RawMessage            `json:"config"`
	Checkpoint json.RawMessage            `json:"checkpoint"`
	Batch      json.RawMessage            `json:"batch,omitempty"`
}

// contextJSON encodes the step context of req: a nil input or config becomes
// {}, nil deps become {} and a nil checkpoint becomes null.
func contextJSON(req Request) ([]byte, error) {
	sc := stepContext{
		TaskID:     req.TaskID,
		Step:       req.Step,
		Attempt:    req.Attempt,
		Input:      orDefault(req.Input, "{}"),
		Deps:       req.Deps,
		Config:     orDefault(req.Config, "{}"),
		Checkpoint: orDefault(req.Checkpoint, "null"),
		Batch:      req.Batch,
	}
	if sc.Deps == nil {
		sc.Deps = map[string]json.RawMessage{}
	}
	b, err := json.Marshal(sc)
	if err != nil {
		return nil, fmt.Errorf("encode step context of task %d step %q: %w", req.TaskID, req.Step, err)
	}
	return b, nil
}

func orDefault(m json.RawMessage, def string) json.RawMessage {
	if len(bytes.TrimSpace(m)) == 0 {
		return json.RawMessage(def)
	}
	return m
}

// templateData decodes the step context into the generic form templates
// see. Numbers stay json.Number so that {{.input.amount}} prints 1000000
// rather than 1e+06.
func templateData(contextJSON []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(contextJSON))
	dec.UseNumber()
	var data map[string]any
	if err := dec.Decode(&data); err != nil {
		return nil, fmt.Errorf("decode step context for templates: %w", err)
	}
	return data, nil
}

// templateFuncs are the functions available in http templates beyond the
// text/template built-ins: json encodes its argument as JSON, so that
// {{json .input.name}} yields a quoted, escaped string.
var templateFuncs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		if err != nil {
			return "", fmt.Errorf("json: %w", err)
		}
		return string(b), nil
	},
	// secret resolves ${secret:NAME}; each attempt sets its own.
	"secret": func(name string) (string, error) { return "", fmt.Errorf("secret %s: %w", name, ErrNoSecrets) },
}

// parseTemplate parses a config template. A missing map key is an error at
// execution rather than the text "<no value>".
func parseTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(templateFuncs).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	return t, nil
}

// jsonResult returns b, trimmed, when it is a JSON document.
func jsonResult(b []byte) (json.RawMessage, bool) {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || !json.Valid(t) {
		return nil, false
	}
	return json.RawMessage(t), true
}

// configObject decodes a step config into its top-level fields and rejects
// keys not in allowed. An empty or null config is an empty object.
func configObject(config json.RawMessage, allowed ...string) (map[string]json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	t := bytes.TrimSpace(config)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return fields, nil
	}
	if t[0] != '{' {
		return nil, fmt.Errorf("config: must be a JSON object")
	}
	if err := json.Unmarshal(t, &fields); err != nil {
		return nil, fmt.Errorf("config: must be a JSON object: %w", err)
	}
	var unknown []string
	for k := range fields {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, fmt.Errorf("config.%s: unknown field (allowed: %s)", unknown[0], strings.Join(allowed, ", "))
	}
	return fields, nil
}

// present reports whether a config field was given and is not null.
func present(fields map[string]json.RawMessage, key string) bool {
	v, ok := fields[key]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

// decodeField decodes fields[key] into v when present; what describes the
// expected type in the error.
func decodeField(fields map[string]json.RawMessage, key, what string, v any) error {
	if !present(fields, key) {
		return nil
	}
	if err := json.Unmarshal(fields[key], v); err != nil {
		return fmt.Errorf("config.%s: must be %s", key, what)
	}
	return nil
}

// stringMap decodes an optional object of strings.
func stringMap(fields map[string]json.RawMessage, key string) (map[string]string, error) {
	var m map[string]string
	if err := decodeField(fields, key, "an object of strings", &m); err != nil {
		return nil, err
	}
	return m, nil
}

// sortedKeys returns the keys of m in order, for deterministic errors.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// excerpt returns at most the last (tail) or first n bytes of b, trimmed of
// space and cut at a rune boundary.
func excerpt(b []byte, n int, tail bool) string {
	if len(b) > n {
		if tail {
			b = b[len(b)-n:]
			for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
				b = b[1:]
			}
		} else {
			cut := n
			for cut > n-utf8.UTFMax && !utf8.RuneStart(b[cut]) {
				cut--
			}
			b = b[:cut]
		}
	}
	return textsafe.String(string(bytes.TrimSpace(b)))
}
