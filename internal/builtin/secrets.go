package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	"github.com/weftrun/weft/internal/outcome"
	"github.com/weftrun/weft/internal/redact"
)

// This file resolves the secrets a built-in step's config names as
// ${secret:NAME}, in an http step's url, headers and body and in an exec
// step's env. The config (stored with the workflow) holds only the
// reference; the value is looked up when the attempt runs, used, and never
// returned: an error, a result, a checkpoint or a progress message that
// quotes a resolved value, in any form it takes on the way (redact.go),
// has it replaced with [secret:NAME] before it leaves the handler, so that
// it is not stored, logged or served by the API.

// SecretLookup returns the value of the secret name; an error fails the
// step for good (a missing secret does not appear by retrying soon).
type SecretLookup func(ctx context.Context, name string) (string, error)

// ErrNoSecrets is the error of a step that names a secret on an engine
// configured with no SecretLookup.
var ErrNoSecrets = errors.New("this engine has no secrets configured")

var (
	secretRef  = regexp.MustCompile(`\$\{secret:([^}]*)\}`)
	secretName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// checkSecretRefs checks the secret references of a config value: each
// names a secret with letters, digits and underscores.
func checkSecretRefs(s string) error {
	for _, m := range secretRef.FindAllStringSubmatch(s, -1) {
		if !secretName.MatchString(m[1]) {
			return fmt.Errorf("%s: a secret's name is letters, digits and _, not starting with a digit", m[0])
		}
	}
	if i := strings.Index(s, "${secret:"); i >= 0 && !secretRef.MatchString(s[i:]) {
		return fmt.Errorf("%q: ${secret:NAME} is not closed", s[i:])
	}
	return nil
}

// secretTemplate turns the secret references of a template's source into
// calls of its secret function, so that they are resolved when it runs:
// text the template renders (from a task's input) is never looked at for
// references.
func secretTemplate(s string) string {
	return secretRef.ReplaceAllString(s, `{{secret "$1"}}`)
}

// secrets resolves the secrets of one attempt and remembers their values,
// to keep them out of what the attempt returns.
type secrets struct {
	ctx    context.Context
	lookup SecretLookup
	values map[string]string // by name
	// red replaces the forms of values; nil while there are none. Set
	// only while the attempt resolves its config, before what it returns
	// is read.
	red *redactor
}

func newSecrets(ctx context.Context, lookup SecretLookup) *secrets {
	return &secrets{ctx: ctx, lookup: lookup}
}

// get returns the value of a secret.
func (s *secrets) get(name string) (string, error) {
	if v, ok := s.values[name]; ok {
		return v, nil
	}
	if !secretName.MatchString(name) {
		return "", fmt.Errorf("secret %q: a secret's name is letters, digits and _", name)
	}
	if s.lookup == nil {
		return "", fmt.Errorf("secret %s: %w", name, ErrNoSecrets)
	}
	v, err := s.lookup(s.ctx, name)
	if err != nil {
		return "", fmt.Errorf("secret %s: %w", name, err)
	}
	if s.values == nil {
		s.values = map[string]string{}
	}
	s.values[name] = v
	s.red = newRedactor(s.values)
	return v, nil
}

// expand replaces the secret references of a config value with their
// values.
func (s *secrets) expand(v string) (string, error) {
	if !strings.Contains(v, "${secret:") {
		return v, nil
	}
	var err error
	out := secretRef.ReplaceAllStringFunc(v, func(ref string) string {
		val, gerr := s.get(ref[len("${secret:") : len(ref)-1])
		if gerr != nil && err == nil {
			err = gerr
		}
		return val
	})
	return out, err
}

// funcs are the template functions that resolve secrets for this attempt.
func (s *secrets) funcs() template.FuncMap {
	return template.FuncMap{"secret": s.get}
}

// redact replaces every resolved value in text, in any of its forms, with
// [secret:NAME].
func (s *secrets) redact(text string) string { return s.red.text(text) }

// clean keeps the resolved secrets out of a handler's result and error,
// keeping the error's kind (permanent, retry after).
func (s *secrets) clean(res json.RawMessage, err error) (json.RawMessage, error) {
	if s.red == nil {
		return res, err
	}
	if res != nil {
		res = s.red.json(res)
	}
	if err == nil {
		return res, nil
	}
	msg := err.Error()
	if s.redact(msg) == msg {
		return res, err
	}
	plain := errors.New(s.redact(msg))
	var perm *outcome.PermanentError
	var after *outcome.RetryAfterError
	switch {
	case errors.As(err, &perm):
		return res, &outcome.PermanentError{Err: plain}
	case errors.As(err, &after):
		return res, &outcome.RetryAfterError{Err: plain, Delay: after.Delay}
	}
	return res, plain
}

// EnvSecrets is the SecretLookup of the weft command: a secret NAME is
// the environment variable WEFT_SECRET_<NAME>, else the file NAME in dir
// (at most 64 KiB, without its trailing newline). Errors name the
// directory as shownDir (the configuration's ${...} reference when one
// made dir), dir itself when shownDir is "".
func EnvSecrets(getenv func(string) string, dir, shownDir string) SecretLookup {
	if shownDir == "" {
		shownDir = dir
	}
	return func(ctx context.Context, name string) (string, error) {
		if v := getenv(SecretEnvPrefix + name); v != "" {
			return v, nil
		}
		if dir == "" {
			return "", fmt.Errorf("not found: set %s%s in the engine's environment or use --secrets-dir", SecretEnvPrefix, name)
		}
		// The name is letters, digits and _ (checked by the caller): it
		// stays in the directory.
		f, err := os.Open(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("not found: no %s%s in the engine's environment and no file %s in %s", SecretEnvPrefix, name, name, shownDir)
		}
		if err != nil {
			return "", fmt.Errorf("open %s in %s: %w", name, shownDir, redact.PathCause(err))
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, 64<<10+1))
		if err != nil {
			return "", fmt.Errorf("read %s in %s: %w", name, shownDir, redact.PathCause(err))
		}
		if len(b) > 64<<10 {
			return "", fmt.Errorf("%s in %s is larger than 64 KiB", name, shownDir)
		}
		return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), nil
	}
}
