package weft_test

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pgCluster is a private throwaway cluster made by scripts/pgtest.
type pgCluster struct {
	url, dir string
}

// startPrivateCluster starts a cluster of the test's own with scripts/pgtest
// and stops it when the test ends.
func startPrivateCluster(t *testing.T) *pgCluster {
	t.Helper()
	root, err := os.Getwd() // the package directory is the repository root
	require.NoError(t, err)
	script := filepath.Join(root, "scripts", "pgtest")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, "start")
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("scripts/pgtest start: %v\n%s", err, stderr.String())
	}
	c := &pgCluster{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		name, value, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok || !strings.HasPrefix(line, "export ") {
			continue
		}
		v, err := shellUnquote(value)
		require.NoError(t, err, "scripts/pgtest start printed %q", line)
		switch name {
		case "WEFT_TEST_POSTGRES_URL":
			c.url = v
		case "WEFT_PGTEST_DIR":
			c.dir = v
		}
	}
	if c.dir != "" {
		t.Cleanup(func() {
			stop := exec.Command(script, "stop")
			stop.Dir = root
			stop.Env = append(os.Environ(), "WEFT_PGTEST_DIR="+c.dir) // the last value wins
			if out, err := stop.CombinedOutput(); err != nil {
				t.Errorf("scripts/pgtest stop: %v\n%s", err, out)
			}
		})
	}
	if c.url == "" || c.dir == "" {
		t.Fatalf("scripts/pgtest start printed no URL or directory:\n%s\n%s", stdout.String(), stderr.String())
	}
	if c.dir == os.Getenv("WEFT_PGTEST_DIR") {
		t.Fatalf("scripts/pgtest start returned the shared cluster %s", c.dir)
	}
	t.Logf("private cluster %s started in %s", c.dir, time.Since(began).Round(time.Millisecond))
	return c
}

// restart runs pg_ctl restart -m fast on the cluster, as scripts/pgtest runs
// pg_ctl: in the cluster's directory, as the postgres user when root. The
// port and the other server options come back from postmaster.opts.
func (c *pgCluster) restart(t *testing.T) { c.pgctl(t, "restart", "-m", "fast") }

// stop stops the cluster (pg_ctl stop -m fast: sessions end with
// admin_shutdown); start starts it again on the same port.
func (c *pgCluster) stop(t *testing.T) { c.pgctl(t, "stop", "-m", "fast") }
func (c *pgCluster) start(t *testing.T) {
	u, err := url.Parse(c.url)
	require.NoError(t, err)
	c.pgctl(t, "start", "-o", "-p "+u.Port())
}

// pgctl runs pg_ctl ACTION on the cluster and waits for it to finish.
func (c *pgCluster) pgctl(t *testing.T, action string, args ...string) {
	t.Helper()
	bindir, err := os.ReadFile(filepath.Join(c.dir, "bindir"))
	require.NoError(t, err)
	argv := []string{filepath.Join(strings.TrimSpace(string(bindir)), "pg_ctl"), action, "-D", filepath.Join(c.dir, "data"),
		"-w", "-t", "30"}
	argv = append(argv, args...)
	if action != "stop" {
		argv = append(argv, "-l", filepath.Join(c.dir, "log"))
	}
	if os.Geteuid() == 0 {
		if runuser, err := exec.LookPath("runuser"); err == nil {
			argv = append([]string{runuser, "-u", "postgres", "--"}, argv...)
		} else {
			quoted := make([]string, len(argv))
			for i, a := range argv {
				quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
			}
			argv = []string{"su", "-s", "/bin/bash", "postgres", "-c", strings.Join(quoted, " ")}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = c.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "log"))
		t.Fatalf("%s: %v\n%s\nserver log:\n%s", strings.Join(argv, " "), err, out, log)
	}
}

// shellUnquote undoes the quoting of scripts/pgtest's export lines:
// single-quoted parts and backslash escapes (a quote inside a value is
// written as quote, backslash-quote, quote, quote).
func shellUnquote(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return "", errors.New("unterminated quote")
			}
			b.WriteString(s[i+1 : i+1+end])
			i += end + 1
		case '\\':
			if i+1 == len(s) {
				return "", errors.New("trailing backslash")
			}
			i++
			b.WriteByte(s[i])
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), nil
}
