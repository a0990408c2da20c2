package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weftrun/weft/internal/outcome"
	"github.com/weftrun/weft/internal/textsafe"
)

// Limits on what Exec keeps of a command's output.
const (
	// maxExecStdout caps the captured stdout; the rest is read and dropped.
	maxExecStdout = 16 << 20
	// maxExecStderr caps the captured stderr, of which the tail is kept.
	maxExecStderr = 64 << 10
	// execErrorStderr is how much of the stderr tail a failure reports.
	execErrorStderr = 2 << 10
	// execWaitDelay bounds how long Exec waits for the output pipes to
	// close once the process has exited or been killed, in case a
	// background descendant still holds them.
	execWaitDelay = 5 * time.Second
)

// execConfig is the config of an exec step.
type execConfig struct {
	// Command is the argv; Command[0] is looked up in PATH when it has no
	// slash.
	Command []string
	// Env is added to the inherited environment.
	Env map[string]string
	// Dir is the working directory; empty means the engine's.
	Dir string
	// PermanentExitCodes are exit codes that fail the step without retry.
	PermanentExitCodes []int
}

var execFields = []string{"command", "env", "dir", "permanent_exit_codes"}

// ValidateExecConfig checks the config of an exec step at workflow
// registration. The config is an object with
//
//   - command: the argv, a non-empty list of strings (required);
//   - env: an object of strings added to the inherited environment; a
//     value may name secrets as ${secret:NAME}, resolved when the step
//     runs (see SecretLookup);
//   - dir: the working directory;
//   - permanent_exit_codes: a list of exit codes (1 to 255) that fail the
//     step at once instead of by its retry policy.
//
// The error names the offending field, as in "config.command: is required
// and must be a non-empty list of strings". Unknown fields are errors.
func ValidateExecConfig(config json.RawMessage) error {
	_, err := parseExecConfig(config)
	return err
}

func parseExecConfig(config json.RawMessage) (*execConfig, error) {
	fields, err := configObject(config, execFields...)
	if err != nil {
		return nil, err
	}
	var c execConfig
	const commandErr = "config.command: is required and must be a non-empty list of strings"
	if !present(fields, "command") {
		return nil, errors.New(commandErr)
	}
	if err := json.Unmarshal(fields["command"], &c.Command); err != nil || len(c.Command) == 0 {
		return nil, errors.New(commandErr)
	}
	if c.Command[0] == "" {
		return nil, errors.New("config.command[0]: must be a non-empty program name")
	}
	for i, arg := range c.Command {
		if strings.IndexByte(arg, 0) >= 0 {
			return nil, fmt.Errorf("config.command[%d]: must not contain a NUL byte", i)
		}
	}

	if c.Env, err = stringMap(fields, "env"); err != nil {
		return nil, err
	}
	for _, k := range sortedKeys(c.Env) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("config.env: %q is not a valid environment variable name", k)
		}
		if strings.IndexByte(c.Env[k], 0) >= 0 {
			return nil, fmt.Errorf("config.env.%s: must not contain a NUL byte", k)
		}
		if err := checkSecretRefs(c.Env[k]); err != nil {
			return nil, fmt.Errorf("config.env.%s: %w", k, err)
		}
	}

	if err := decodeField(fields, "dir", "a string", &c.Dir); err != nil {
		return nil, err
	}
	if present(fields, "dir") && c.Dir == "" {
		return nil, errors.New("config.dir: must be a non-empty path")
	}

	if err := decodeField(fields, "permanent_exit_codes", "a list of integers", &c.PermanentExitCodes); err != nil {
		return nil, err
	}
	for i, code := range c.PermanentExitCodes {
		if code < 1 || code > 255 {
			return nil, fmt.Errorf("config.permanent_exit_codes[%d]: %d is not an exit code from 1 to 255", i, code)
		}
	}
	return &c, nil
}

// Exec runs the command of an exec step.
//
// The command gets the step context as one JSON object on stdin and the
// environment variables WEFT_TASK_ID, WEFT_STEP and WEFT_ATTEMPT, and, when
// the step belongs to a trace, TRACEPARENT (and TRACESTATE) in W3C form. When its
// stdout, trimmed, is a JSON document that is the result; otherwise the
// result is {"stdout": "<stdout>"}. Stdout is captured up to 16 MiB: output
// beyond it is dropped, and the result is then
// {"stdout": "<first 16 MiB>", "stdout_truncated": true}, never parsed as
// JSON. Of stderr the last 64 KiB are kept. Output quoted as text (the
// "stdout" of a result, the stderr of an error) has each NUL and each byte
// that is not UTF-8 replaced with U+FFFD, so that every store can keep it;
// a JSON result is used as it is (the engine then replaces its bytes that
// are not UTF-8 and fails a result holding \u0000).
//
// Exit status 0 succeeds. An exit code listed in permanent_exit_codes is a
// PermanentError; any other failure is a plain error reading like
// "exit status 3: <tail of stderr>". A command that cannot be started (not
// found, not executable, missing dir) is a PermanentError naming it.
//
// When ctx is done the process and its whole process group are killed and
// the error wraps ctx.Err(). The command dies with the engine too: on Linux
// the kernel kills it when the engine's process ends, and req.Guard kills
// its process group (what it started in the background) then.
func Exec(ctx context.Context, req Request) (json.RawMessage, error) {
	return runExec(ctx, req, execLimits{stdout: maxExecStdout, waitDelay: execWaitDelay})
}

// runExec is Exec with the given limits.
func runExec(ctx context.Context, req Request, lim execLimits) (json.RawMessage, error) {
	s := newSecrets(ctx, req.Secrets)
	return s.clean(execCommand(ctx, req, lim, s))
}

// execLimits are the limits of runExec, which tests lower.
type execLimits struct {
	stdout    int           // bytes of stdout kept
	waitDelay time.Duration // see execWaitDelay
}

// SecretEnvPrefix starts the names of the environment variables that hold
// secrets for the weft CLI (WEFT_SECRET_<NAME>): commands do not inherit
// them, they get only the secrets their env names.
const SecretEnvPrefix = "WEFT_SECRET_"

// inheritedEnv is the engine's environment less its secrets.
func inheritedEnv() []string {
	env := os.Environ()
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, SecretEnvPrefix) {
			out = append(out, kv)
		}
	}
	return out
}

// execCommand runs the command of an exec step, resolving secrets with s.
func execCommand(ctx context.Context, req Request, lim execLimits, s *secrets) (json.RawMessage, error) {
	cfg, err := parseExecConfig(req.Config)
	if err != nil {
		return nil, &outcome.PermanentError{Err: fmt.Errorf("exec step %q: invalid config: %w", req.Step, err)}
	}
	stdin, err := contextJSON(req)
	if err != nil {
		return nil, &outcome.PermanentError{Err: err}
	}

	cmd := exec.CommandContext(ctx, cfg.Command[0], cfg.Command[1:]...)
	cmd.Dir = cfg.Dir
	cmd.Env = inheritedEnv()
	for _, k := range sortedKeys(cfg.Env) {
		v, err := s.expand(cfg.Env[k])
		if err != nil {
			return nil, &outcome.PermanentError{Err: fmt.Errorf("exec step %q: config.env.%s: %w", req.Step, k, err)}
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Last, so that the config cannot override them; exec.Cmd keeps the
	// last value of a duplicated variable.
	cmd.Env = append(cmd.Env,
		"WEFT_TASK_ID="+strconv.FormatInt(req.TaskID, 10),
		"WEFT_STEP="+req.Step,
		"WEFT_ATTEMPT="+strconv.Itoa(req.Attempt),
	)
	for k, v := range traceContext(ctx) {
		cmd.Env = append(cmd.Env, strings.ToUpper(k)+"="+v)
	}
	cmd.Stdin = bytes.NewReader(stdin)
	var control *controlChannel
	if req.Report != nil {
		if control, err = openControl(ctx, req.Report, s.red); err != nil {
			return nil, fmt.Errorf("exec %q: %w", cfg.Command[0], err)
		}
		defer control.close()
		cmd.ExtraFiles = []*os.File{control.w}
		cmd.Env = append(cmd.Env, "WEFT_CONTROL_FD=3")
	}
	stdout := &headBuffer{limit: lim.stdout}
	stderr := &tailBuffer{limit: maxExecStderr}
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	// Run the command in a process group of its own so that cancellation
	// reaches its children too: a shell's `sleep` would otherwise survive
	// and hold the output pipes open. The command dies with the engine
	// (dieWithParent, and req.Guard for what it starts).
	attr := &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(attr)
	cmd.SysProcAttr = attr
	cmd.Cancel = func() error {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill process group %d: %w", cmd.Process.Pid, err)
		}
		return nil
	}
	cmd.WaitDelay = lim.waitDelay

	release := holdThread()
	defer release()
	if err := cmd.Start(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("exec %q: not started: %w", cfg.Command[0], ctx.Err())
		}
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, &outcome.PermanentError{Err: fmt.Errorf("exec %q: cannot start: %w", cfg.Command[0], err)}
		}
		return nil, fmt.Errorf("exec %q: cannot start: %w", cfg.Command[0], err)
	}
	// Without the watchdog (no /bin/sh) the parent-death signal still
	// guards the command itself.
	_ = req.Guard.add(cmd.Process.Pid)
	// Unregistered last, after a group that outlived the command is killed.
	defer req.Guard.remove(cmd.Process.Pid)
	if control != nil {
		control.started()
	}
	waitErr := cmd.Wait()
	if waitErr != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("exec %q: killed: %w", cfg.Command[0], ctx.Err())
	}
	if control != nil {
		if err := control.finish(lim.waitDelay); err != nil {
			return nil, err
		}
	}

	var exitErr *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exitErr):
		failure := waitErr
		// Secrets are replaced before the excerpt is cut, so that it
		// cannot cut one.
		b := stderr.Bytes()
		if stderr.cut {
			b = s.red.tail(b)
		}
		if tail := excerpt([]byte(s.redact(string(b))), execErrorStderr, true); tail != "" {
			failure = fmt.Errorf("%w: %s", waitErr, tail)
		}
		if code := exitErr.ExitCode(); code > 0 && containsInt(cfg.PermanentExitCodes, code) {
			return nil, &outcome.PermanentError{Err: failure}
		}
		return nil, failure
	case errors.Is(waitErr, exec.ErrWaitDelay):
		// The command exited but left a process behind that holds its
		// output; its group cannot have been reused while that process
		// lives in it. The output is incomplete and the process leaked
		// from this attempt, so kill the group and fail.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return nil, fmt.Errorf("exec %q: exited, but a background process kept stdout or stderr open for %s and was killed: %w",
			cfg.Command[0], lim.waitDelay, waitErr)
	default:
		return nil, fmt.Errorf("exec %q: %w", cfg.Command[0], waitErr)
	}

	// Secrets are replaced in the text before it is quoted in JSON, which
	// would escape their JSON forms once more.
	if stdout.truncated {
		res, err := json.Marshal(map[string]any{"stdout": textsafe.String(s.redact(string(s.red.head(stdout.buf)))), "stdout_truncated": true})
		if err != nil {
			return nil, fmt.Errorf("exec %q: encode result: %w", cfg.Command[0], err)
		}
		return res, nil
	}
	if res, ok := jsonResult(stdout.buf); ok {
		return res, nil
	}
	res, err := json.Marshal(map[string]string{"stdout": textsafe.String(s.redact(string(stdout.buf)))})
	if err != nil {
		return nil, fmt.Errorf("exec %q: encode result: %w", cfg.Command[0], err)
	}
	return res, nil
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// headBuffer keeps the first limit bytes written to it and drops the rest,
// while accepting everything so that the writer never blocks or fails.
type headBuffer struct {
	limit     int
	buf       []byte
	truncated bool
}

func (w *headBuffer) Write(p []byte) (int, error) {
	if room := w.limit - len(w.buf); room < len(p) {
		w.buf = append(w.buf, p[:max(room, 0)]...)
		w.truncated = true
	} else {
		w.buf = append(w.buf, p...)
	}
	return len(p), nil
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	limit int
	buf   []byte
	cut   bool // bytes were dropped from the start
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if n >= w.limit {
		w.cut = w.cut || len(w.buf) > 0 || n > w.limit
		w.buf = append(w.buf[:0], p[n-w.limit:]...)
		return n, nil
	}
	if over := len(w.buf) + n - w.limit; over > 0 {
		w.cut = true
		w.buf = w.buf[:copy(w.buf, w.buf[over:])]
	}
	w.buf = append(w.buf, p...)
	return n, nil
}

// Bytes returns the kept tail.
func (w *tailBuffer) Bytes() []byte { return w.buf }
