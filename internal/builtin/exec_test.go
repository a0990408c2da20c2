package builtin

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/outcome"
)

// shConfig returns an exec config running script with /bin/sh -c, merged
// with the extra fields.
func shConfig(t *testing.T, script string, extra map[string]any) json.RawMessage {
	t.Helper()
	c := map[string]any{"command": []string{"/bin/sh", "-c", script}}
	for k, v := range extra {
		c[k] = v
	}
	b, err := json.Marshal(c)
	require.NoError(t, err)
	return b
}

func TestExecStdinAndEnv(t *testing.T) {
	t.Parallel()
	// The script wraps its environment and stdin into one JSON document.
	const script = `printf '{"task_id":"%s","step":"%s","attempt":"%s","extra":"%s","cwd":"%s","stdin":' ` +
		`"$WEFT_TASK_ID" "$WEFT_STEP" "$WEFT_ATTEMPT" "$EXTRA" "$(pwd -P)"; cat; printf '}'`

	dir := t.TempDir()
	realDir, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	engineDir, err := os.Getwd()
	require.NoError(t, err)
	engineDir, err = filepath.EvalSymlinks(engineDir)
	require.NoError(t, err)

	tests := []struct {
		name      string
		req       Request
		extra     map[string]any
		wantEnv   map[string]string
		wantStdin map[string]string // key -> JSON text, config excluded
	}{
		{
			name:  "empty input, deps and checkpoint",
			req:   Request{TaskID: 7, Step: "build", Attempt: 1},
			extra: nil,
			wantEnv: map[string]string{
				"task_id": "7", "step": "build", "attempt": "1", "extra": "", "cwd": engineDir,
			},
			wantStdin: map[string]string{
				"task_id": `7`, "step": `"build"`, "attempt": `1`,
				"input": `{}`, "deps": `{}`, "checkpoint": `null`,
			},
		},
		{
			name: "everything set",
			req: Request{
				TaskID: 42, Step: "deploy", Attempt: 3,
				Input:      json.RawMessage(`{"env":"prod"}`),
				Deps:       map[string]json.RawMessage{"build": json.RawMessage(`{"image":"x:1"}`)},
				Checkpoint: json.RawMessage(`{"done":2}`),
			},
			extra: map[string]any{"env": map[string]string{"EXTRA": "hello", "WEFT_STEP": "spoofed"}, "dir": dir},
			wantEnv: map[string]string{
				"task_id": "42", "step": "deploy", "attempt": "3", "extra": "hello", "cwd": realDir,
			},
			wantStdin: map[string]string{
				"task_id": `42`, "step": `"deploy"`, "attempt": `3`,
				"input": `{"env":"prod"}`, "deps": `{"build":{"image":"x:1"}}`, "checkpoint": `{"done":2}`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := tt.req
			req.Config = shConfig(t, script, tt.extra)
			res, err := Exec(context.Background(), req)
			require.NoError(t, err)

			var got struct {
				TaskID  string                     `json:"task_id"`
				Step    string                     `json:"step"`
				Attempt string                     `json:"attempt"`
				Extra   string                     `json:"extra"`
				Cwd     string                     `json:"cwd"`
				Stdin   map[string]json.RawMessage `json:"stdin"`
			}
			require.NoError(t, json.Unmarshal(res, &got), "result %s", res)
			require.Equal(t, tt.wantEnv, map[string]string{
				"task_id": got.TaskID, "step": got.Step, "attempt": got.Attempt, "extra": got.Extra, "cwd": got.Cwd,
			})

			require.JSONEq(t, string(req.Config), string(got.Stdin["config"]))
			delete(got.Stdin, "config")
			stdin := map[string]string{}
			for k, v := range got.Stdin {
				stdin[k] = string(v)
			}
			require.Equal(t, tt.wantStdin, stdin)
		})
	}
}

func TestExecResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		want   string
	}{
		{name: "JSON object", script: `printf '  {"a": [1, 2]}\n\n'`, want: `{"a":[1,2]}`},
		{name: "JSON number", script: `echo 42`, want: `42`},
		{name: "JSON string", script: `echo '"hi"'`, want: `"hi"`},
		{name: "text", script: `echo hello; echo world`, want: `{"stdout":"hello\nworld\n"}`},
		{name: "truncated JSON is text", script: `printf '{"a":'`, want: `{"stdout":"{\"a\":"}`},
		{name: "empty", script: `true`, want: `{"stdout":""}`},
		{name: "stderr is not the result", script: `echo oops >&2`, want: `{"stdout":""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := Exec(context.Background(), Request{Step: "s", Attempt: 1, Config: shConfig(t, tt.script, nil)})
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(res))
		})
	}
}

func TestExecStdoutCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		want   string
	}{
		{name: "under the cap", script: `printf 12345`, want: `12345`},
		// Cut, the number would still be valid JSON: it must not be
		// taken for the result.
		{name: "over the cap", script: `printf 123456789`, want: `{"stdout":"123456","stdout_truncated":true}`},
		{name: "far over the cap", script: `head -c 1000000 /dev/zero | tr '\0' 1`, want: `{"stdout":"111111","stdout_truncated":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lim := execLimits{stdout: 6, waitDelay: execWaitDelay}
			res, err := runExec(context.Background(), Request{Step: "s", Attempt: 1, Config: shConfig(t, tt.script, nil)}, lim)
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(res))
		})
	}
}

func TestExecFailures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExecutable := filepath.Join(dir, "script.sh")
	require.NoError(t, os.WriteFile(notExecutable, []byte("#!/bin/sh\necho hi\n"), 0o644))

	tests := []struct {
		name      string
		config    json.RawMessage
		permanent bool
		// want is the whole message or, with contains, a part of it.
		want     string
		contains bool
	}{
		{
			name:      "permanent exit code",
			config:    shConfig(t, `echo starting; echo '  card declined  ' >&2; exit 3`, map[string]any{"permanent_exit_codes": []int{2, 3}}),
			permanent: true,
			want:      "permanent: exit status 3: card declined",
		},
		{
			name:   "other exit code is retryable",
			config: shConfig(t, `echo 'gateway timeout' >&2; exit 4`, map[string]any{"permanent_exit_codes": []int{3}}),
			want:   "exit status 4: gateway timeout",
		},
		{
			name:   "no stderr",
			config: shConfig(t, `exit 5`, nil),
			want:   "exit status 5",
		},
		{
			name:   "killed by a signal is retryable",
			config: shConfig(t, `kill -9 $$`, map[string]any{"permanent_exit_codes": []int{9, 137}}),
			want:   "signal: killed",
		},
		{
			name:      "command not found",
			config:    json.RawMessage(`{"command":["weft-no-such-command","arg"]}`),
			permanent: true,
			want:      `"weft-no-such-command"`,
			contains:  true,
		},
		{
			name:      "not executable",
			config:    json.RawMessage(`{"command":[` + strconv.Quote(notExecutable) + `]}`),
			permanent: true,
			want:      "cannot start",
			contains:  true,
		},
		{
			name:      "missing dir",
			config:    shConfig(t, `true`, map[string]any{"dir": filepath.Join(dir, "missing")}),
			permanent: true,
			want:      "cannot start",
			contains:  true,
		},
		{
			name:      "invalid config",
			config:    json.RawMessage(`{"command":[]}`),
			permanent: true,
			want:      "config.command: is required",
			contains:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := Exec(context.Background(), Request{Step: "s", Attempt: 1, Config: tt.config})
			require.Error(t, err)
			require.Nil(t, res)
			require.Equal(t, tt.permanent, outcome.IsPermanent(err), "error: %v", err)
			if tt.contains {
				require.Contains(t, err.Error(), tt.want)
			} else {
				require.Equal(t, tt.want, err.Error())
			}
		})
	}
}

func TestExecStderrTail(t *testing.T) {
	t.Parallel()
	// 100 KB of noise between a head marker and the real message: the
	// error keeps about 2 KiB of the tail.
	script := `{ printf HEAD; head -c 100000 /dev/zero | tr '\0' x; printf '\nfatal: disk full\n'; } >&2; exit 1`
	_, err := Exec(context.Background(), Request{Step: "s", Attempt: 1, Config: shConfig(t, script, nil)})
	require.Error(t, err)
	require.False(t, outcome.IsPermanent(err))
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, "exit status 1: xxx"), msg[:40])
	require.True(t, strings.HasSuffix(msg, "xxx\nfatal: disk full"))
	require.NotContains(t, msg, "HEAD")
	require.LessOrEqual(t, len(msg), len("exit status 1: ")+execErrorStderr)
	require.Greater(t, len(msg), execErrorStderr-100)
	var exitErr interface{ ExitCode() int }
	require.ErrorAs(t, err, &exitErr)
	require.Equal(t, 1, exitErr.ExitCode())
}

func TestExecCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// timeout, when set, ends the attempt; otherwise the test cancels
		// it once the script has started its child.
		timeout time.Duration
		want    error
	}{
		{name: "task cancelled", want: context.Canceled},
		{name: "attempt timed out", timeout: 100 * time.Millisecond, want: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The script starts a sleep in the background, reports its
			// pid through a FIFO and waits for it. Killing only the shell
			// would leave the sleep holding stdout open until the wait
			// delay: returning sooner shows the group was killed.
			fifo := filepath.Join(t.TempDir(), "pid")
			require.NoError(t, syscall.Mkfifo(fifo, 0o600))
			script := `sleep 60 & echo $! > "$PIDFIFO"; wait`
			if tt.timeout > 0 {
				// Nothing reads the FIFO: the timeout may strike first.
				script = `sleep 60 & wait`
			}
			cfg := shConfig(t, script, map[string]any{"env": map[string]string{"PIDFIFO": fifo}})

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.timeout > 0 {
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			type result struct {
				res json.RawMessage
				err error
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				res, err := Exec(ctx, Request{Step: "s", Attempt: 1, Config: cfg})
				done <- result{res, err}
			}()

			if tt.timeout == 0 {
				pids := make(chan string, 1)
				go func() {
					// Opening the FIFO blocks until the script opens it.
					f, err := os.Open(fifo)
					if err != nil {
						pids <- err.Error()
						return
					}
					defer f.Close()
					line, err := bufio.NewReader(f).ReadString('\n')
					if err != nil {
						line = err.Error()
					}
					pids <- line
				}()
				select {
				case line := <-pids:
					pid, err := strconv.Atoi(strings.TrimSpace(line))
					require.NoError(t, err, "reading the child's pid")
					require.Positive(t, pid)
				case r := <-done:
					require.FailNow(t, "Exec returned before its child started", "result %s, error %v", r.res, r.err)
				}
				cancel()
			}

			r := <-done
			elapsed := time.Since(start)
			require.Nil(t, r.res)
			require.ErrorIs(t, r.err, tt.want)
			require.False(t, outcome.IsPermanent(r.err))
			require.Less(t, elapsed, execWaitDelay, "the sleep child kept the pipes open: its group was not killed")
		})
	}
}

func TestExecBackgroundHoldsOutput(t *testing.T) {
	t.Parallel()
	// The shell exits at once, but its background sleep inherited stdout:
	// Exec gives up on the pipe after the wait delay and fails.
	lim := execLimits{stdout: maxExecStdout, waitDelay: 100 * time.Millisecond}
	cfg := shConfig(t, `sleep 60 & echo started`, nil)
	res, err := runExec(context.Background(), Request{Step: "s", Attempt: 1, Config: cfg}, lim)
	require.Nil(t, res)
	require.ErrorIs(t, err, exec.ErrWaitDelay)
	require.False(t, outcome.IsPermanent(err))
	require.ErrorContains(t, err, "a background process kept stdout or stderr open for 100ms and was killed")
}

func TestExecIgnoringStdin(t *testing.T) {
	t.Parallel()
	// A command that never reads a large stdin still succeeds.
	input, err := json.Marshal(map[string]string{"blob": strings.Repeat("x", 1<<20)})
	require.NoError(t, err)
	res, err := Exec(context.Background(), Request{Step: "s", Attempt: 1, Input: input, Config: shConfig(t, `echo ok`, nil)})
	require.NoError(t, err)
	require.JSONEq(t, `{"stdout":"ok\n"}`, string(res))
}

func TestExecCancelledBeforeStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Exec(ctx, Request{Step: "s", Attempt: 1, Config: shConfig(t, `echo hi`, nil)})
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, outcome.IsPermanent(err))
}

func TestValidateExecConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		config string
		want   string // "" for valid
	}{
		{name: "minimal", config: `{"command":["true"]}`},
		{name: "full", config: `{"command":["/bin/sh","-c","exit 0"],"env":{"A":"1"},"dir":"/tmp","permanent_exit_codes":[1,255]}`},
		{name: "null optional fields", config: `{"command":["true"],"env":null,"dir":null,"permanent_exit_codes":null}`},
		{name: "missing config", config: ``, want: "config.command: is required and must be a non-empty list of strings"},
		{name: "null config", config: `null`, want: "config.command: is required and must be a non-empty list of strings"},
		{name: "not an object", config: `["true"]`, want: "config: must be a JSON object"},
		{name: "missing command", config: `{}`, want: "config.command: is required and must be a non-empty list of strings"},
		{name: "empty command", config: `{"command":[]}`, want: "config.command: is required and must be a non-empty list of strings"},
		{name: "string command", config: `{"command":"ls -l"}`, want: "config.command: is required and must be a non-empty list of strings"},
		{name: "non-string argument", config: `{"command":["ls",1]}`, want: "config.command: is required and must be a non-empty list of strings"},
		{name: "empty program", config: `{"command":["","x"]}`, want: "config.command[0]: must be a non-empty program name"},
		{name: "NUL in argument", config: `{"command":["echo","a\u0000b"]}`, want: "config.command[1]: must not contain a NUL byte"},
		{name: "unknown field", config: `{"command":["true"],"timeout":"1s","args":[]}`, want: "config.args: unknown field (allowed: command, env, dir, permanent_exit_codes)"},
		{name: "env not strings", config: `{"command":["true"],"env":{"A":1}}`, want: "config.env: must be an object of strings"},
		{name: "env bad name", config: `{"command":["true"],"env":{"A=B":"1"}}`, want: `config.env: "A=B" is not a valid environment variable name`},
		{name: "dir not a string", config: `{"command":["true"],"dir":5}`, want: "config.dir: must be a string"},
		{name: "dir empty", config: `{"command":["true"],"dir":""}`, want: "config.dir: must be a non-empty path"},
		{name: "codes not ints", config: `{"command":["true"],"permanent_exit_codes":["3"]}`, want: "config.permanent_exit_codes: must be a list of integers"},
		{name: "code zero", config: `{"command":["true"],"permanent_exit_codes":[3,0]}`, want: "config.permanent_exit_codes[1]: 0 is not an exit code from 1 to 255"},
		{name: "code too big", config: `{"command":["true"],"permanent_exit_codes":[256]}`, want: "config.permanent_exit_codes[0]: 256 is not an exit code from 1 to 255"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateExecConfig(json.RawMessage(tt.config))
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.want)
		})
	}
}

func TestOutputBuffers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		writes    []string
		wantHead  string
		truncated bool
		wantTail  string
	}{
		{name: "nothing", writes: nil, wantHead: "", wantTail: ""},
		{name: "fits", writes: []string{"ab", "cd"}, wantHead: "abcd", wantTail: "abcd"},
		{name: "exactly the limit", writes: []string{"abcde"}, wantHead: "abcde", wantTail: "abcde"},
		{name: "overflow across writes", writes: []string{"abc", "def", "gh"}, wantHead: "abcde", truncated: true, wantTail: "defgh"},
		{name: "one big write", writes: []string{"abcdefghij"}, wantHead: "abcde", truncated: true, wantTail: "fghij"},
		{name: "big write after small", writes: []string{"xy", "abcdefghij", "k"}, wantHead: "xyabc", truncated: true, wantTail: "ghijk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			head := &headBuffer{limit: 5}
			tail := &tailBuffer{limit: 5}
			for _, w := range tt.writes {
				n, err := head.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
				n, err = tail.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			require.Equal(t, tt.wantHead, string(head.buf))
			require.Equal(t, tt.truncated, head.truncated)
			require.Equal(t, tt.wantTail, string(tail.Bytes()))
		})
	}
}

func TestExcerpt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		n    int
		tail bool
		want string
	}{
		{name: "short", in: "  hi \n", n: 10, want: "hi"},
		{name: "head", in: "abcdef", n: 3, want: "abc"},
		{name: "tail", in: "abcdef", n: 3, tail: true, want: "def"},
		{name: "head cuts before a rune", in: "ab€", n: 3, want: "ab"},
		{name: "tail cuts after a rune", in: "€ab", n: 4, tail: true, want: "ab"},
		{name: "invalid UTF-8", in: "a\xffb", n: 10, want: "a\uFFFDb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, excerpt([]byte(tt.in), tt.n, tt.tail))
		})
	}
}
