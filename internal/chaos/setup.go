package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/weftproc"
	"github.com/weftrun/weft/internal/wireworker"
	"github.com/weftrun/weft/weftdb"
)

// Setting up a run: its directory and binary, the database (and, on
// PostgreSQL, its server and schema), the workload's files, and weft serve
// with its remote worker. What each step sets up is undone by r.close, in
// the reverse order.

// onClose registers f to run when the run ends (last registered, first run).
func (r *runner) onClose(f func()) { r.closers = append(r.closers, f) }

func (r *runner) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// setup makes the run's directory, builds the binary, opens the database
// and writes the workload's files.
func (r *runner) setup(ctx context.Context) (err error) {
	r.dir, err = os.MkdirTemp("", "weft-chaos-")
	if err != nil {
		return err
	}
	r.onClose(func() { os.RemoveAll(r.dir) })
	if r.bin, err = weftproc.Build(ctx, r.cfg.Root, r.dir); err != nil {
		return err
	}
	long, err := r.shortLease(ctx)
	if err != nil {
		return err
	}
	if err := r.openDatabase(ctx); err != nil {
		return err
	}
	return r.writeWorkload(long)
}

// openDatabase sets r.url (what the workers use) and opens the store, the
// database and an engine on it. The schema is applied here, before any
// engine works (applying it while engines work can deadlock with them).
func (r *runner) openDatabase(ctx context.Context) (err error) {
	var ownURL, schema string
	if r.cfg.Store == "postgres" && r.cfg.DB == "" && r.cfg.PGDir != "" {
		return errors.New("a PostgreSQL directory without its server's URL")
	}
	switch r.cfg.Store {
	case "sqlite":
		r.url = filepath.Join(r.dir, "chaos.db")
		if vol, unmount, err := mountVolume(r.dir); err == nil {
			r.onClose(unmount)
			r.volume = vol
			r.url = filepath.Join(vol, "chaos.db")
		} else {
			r.logf("no small volume for the disk-full fault (%v): it is not injected", err)
		}
		ownURL = r.url
	case "postgres":
		if r.cfg.DB == "" {
			stop, err := r.startCluster(ctx)
			if err != nil {
				return err
			}
			r.onClose(stop)
		}
		schema = fmt.Sprintf("chaos_%d_%d", r.cfg.Seed, time.Now().UnixNano()%1e9)
		r.appName = "weft_" + schema
		ownURL = weftproc.WithParam(r.cfg.DB, "search_path", schema)
		r.url = weftproc.WithParam(ownURL, "application_name", r.appName)
	default:
		return fmt.Errorf("--store must be sqlite or postgres, not %q", r.cfg.Store)
	}

	r.st, err = weftdb.Open(ctx, ownURL, weftdb.Options{})
	if err != nil {
		return fmt.Errorf("open %s: %w", weftdb.Redact(ownURL), err)
	}
	r.onClose(func() { r.st.Close() })
	dbs, ok := r.st.(interface{ DB() *sql.DB })
	if !ok {
		return errors.New("the store exposes no *sql.DB")
	}
	r.db = dbs.DB()
	if schema != "" {
		// Runs before the store closes (registered after it).
		r.onClose(func() {
			if _, err := r.db.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`); err != nil {
				r.logf("drop schema %s: %v", schema, err)
			}
		})
	}
	r.eng, err = weft.New(r.st, weft.Config{Logger: slog.New(slog.DiscardHandler)})
	return err
}

// startCluster starts a throwaway cluster with scripts/pgtest and returns
// the function that stops it.
func (r *runner) startCluster(ctx context.Context) (func(), error) {
	script := filepath.Join(r.cfg.Root, "scripts", "pgtest")
	cmd := exec.CommandContext(ctx, script, "start")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("scripts/pgtest start: %v\n%s", err, stderr.String())
	}
	for line := range strings.Lines(stdout.String()) {
		name, value, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "export ")), "=")
		if !ok {
			continue
		}
		value = strings.Trim(value, "'") // pgtest quotes; our values hold no quotes
		switch name {
		case "WEFT_TEST_POSTGRES_URL":
			r.cfg.DB = value
		case "WEFT_PGTEST_DIR":
			r.cfg.PGDir = value
		}
	}
	dir := r.cfg.PGDir
	return func() {
		stop := exec.Command(script, "stop")
		stop.Env = append(os.Environ(), "WEFT_PGTEST_DIR="+dir)
		if out, err := stop.CombinedOutput(); err != nil {
			r.logf("scripts/pgtest stop: %v\n%s", err, out)
		}
	}, nil
}

// writeWorkload writes the step script and the workflows' templates; the
// long steps work for long.
func (r *runner) writeWorkload(long time.Duration) error {
	r.script = filepath.Join(r.dir, "step.sh")
	r.ledger = filepath.Join(r.dir, "ledger")
	r.mixTpl = filepath.Join(r.dir, "mix.yaml")
	r.longTpl = filepath.Join(r.dir, "long.yaml")
	longSecs := strconv.FormatFloat(long.Seconds(), 'f', -1, 64)
	for _, f := range []struct {
		path string
		text []byte
	}{
		{r.script, []byte(stepScript)},
		{r.mixTpl, fmt.Appendf(nil, template, r.script, r.ledger)},
		{r.longTpl, fmt.Appendf(nil, longTemplate, r.script, r.ledger, longSecs)},
	} {
		if err := os.WriteFile(f.path, f.text, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// startServe starts `weft serve` with a remote worker attached, and
// submits the first chaos/remote task (r.remoteFirst). It runs before the
// workers start: everything that opens the database does it before there
// is work.
func (r *runner) startServe(ctx context.Context) error {
	token, err := weftproc.CreateKey(ctx, r.bin, r.url, "chaos", "workers:connect")
	if err != nil {
		return err
	}
	if r.srvAddr, err = weftproc.FreeAddr(); err != nil {
		return err
	}
	r.srv = &weftproc.Proc{Name: "serve", Args: []string{"serve", "--db", r.url, "--addr", r.srvAddr, "--concurrency", "4"}}
	if err := r.startServer(ctx); err != nil {
		return err
	}
	r.onClose(func() { r.srv.Stop(15 * time.Second) })
	rtpl := filepath.Join(r.dir, "remote.yaml")
	if err := os.WriteFile(rtpl, fmt.Appendf(nil, remoteTemplate, r.script, r.ledger), 0o644); err != nil {
		return err
	}
	if r.remoteFirst, err = r.submitFile(ctx, rtpl); err != nil {
		return err
	}
	rw := &wireworker.Worker{Base: "http://" + r.srvAddr, Token: token, Name: "chaos", Handler: "remote.work",
		Client: &http.Client{Timeout: 10 * time.Second}, Work: remoteWork(r.ledger)}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { rw.Run(rctx); close(done) }()
	r.onClose(func() {
		cancel()
		<-done
		if n := rw.Retries(); n > 0 {
			r.logf("the remote worker retried %d completions through server restarts", n)
		}
	})
	return nil
}

// submitFile has the CLI register the workflow of a template file and
// submit a task of it, with the CLI's options args; it returns the task.
func (r *runner) submitFile(ctx context.Context, path string, args ...string) (int64, error) {
	out, err := exec.CommandContext(ctx, r.bin, append([]string{"submit", path, "--db", r.url}, args...)...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("weft submit: %v\n%s", err, out)
	}
	id, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("weft submit printed %q", out)
	}
	return id, nil
}
