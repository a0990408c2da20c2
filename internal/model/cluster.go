package model

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/weftproc"
	"github.com/weftrun/weft/internal/wireworker"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/weftdb"
)

// The cluster the model drives: `weft worker` engines, one `weft serve`
// (with its own engine, and the REST API the operator actions go through),
// and a remote worker in this process speaking the wire protocol.

// proc is one weft process of the cluster. stopping: SIGTERM was sent;
// the driver restarts it once it has exited.
type proc struct {
	*weftproc.Proc
	stopping bool
}

func newProc(name string, env []string, args ...string) *proc {
	return &proc{Proc: &weftproc.Proc{Name: name, Args: args, Env: env}}
}

func (p *proc) start(bin string) error {
	p.stopping = false
	return p.Start(bin)
}

// cluster is the running system under test.
type cluster struct {
	cfg     Config
	dir     string
	bin     string
	url     string // the database, as the processes use it
	schema  string // postgres: the run's own schema
	st      store.Store
	db      *sql.DB // st's
	env     []string
	base    string // http://addr of weft serve
	token   string
	http    *http.Client
	serve   *proc
	workers []*proc
	remote  *wireworker.Worker
	runs    *remoteRuns // the remote worker's work
	rcancel context.CancelFunc
	rdone   chan struct{}
	ledger  string
	script  string
	// leaseFlags are the worker flags that set a short lease, when the
	// binary has them; lease is the lease then in force.
	leaseFlags []string
	lease      time.Duration
	logf       func(string, ...any)
}

// leaseSettings returns the flags that give engines a short lease, if the
// binary has them (`weft worker --lease-ttl`), and the lease in force.
func leaseSettings(bin string, want time.Duration) ([]string, time.Duration) {
	out, _ := exec.Command(bin, "worker", "--help").CombinedOutput()
	if bytes.Contains(out, []byte("--lease-ttl")) && bytes.Contains(out, []byte("--heartbeat-interval")) {
		return []string{"--lease-ttl", want.String(), "--heartbeat-interval", (want / 8).String()}, want
	}
	return nil, 30 * time.Second // the engines' default
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startCluster starts a fresh cluster in a new directory (and, on
// PostgreSQL, a new schema).
func startCluster(ctx context.Context, cfg Config, bin string) (_ *cluster, err error) {
	c := &cluster{cfg: cfg, logf: cfg.logf, http: &http.Client{Timeout: 30 * time.Second}}
	c.dir, err = os.MkdirTemp("", "weft-model-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	c.bin = bin
	c.leaseFlags, c.lease = leaseSettings(bin, cfg.Lease)
	switch cfg.Store {
	case "sqlite":
		c.url = filepath.Join(c.dir, "model.db")
	case "postgres":
		if cfg.DB == "" {
			return nil, errors.New("postgres needs --db URL or WEFT_TEST_POSTGRES_URL")
		}
		c.schema = "model_" + randomSuffix()
		c.url = weftproc.WithParam(cfg.DB, "search_path", c.schema)
	default:
		return nil, fmt.Errorf("--store must be sqlite or postgres, not %q", cfg.Store)
	}
	// The schema is applied before any engine works.
	c.st, err = weftdb.Open(ctx, c.url, weftdb.Options{})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", weftdb.Redact(c.url), err)
	}
	dbs, ok := c.st.(interface{ DB() *sql.DB })
	if !ok {
		return nil, errors.New("the store exposes no *sql.DB")
	}
	c.db = dbs.DB()
	c.env = append(os.Environ(), "WEFT_LOG_LEVEL=warn")
	c.ledger = filepath.Join(c.dir, "ledger")
	c.script = filepath.Join(c.dir, "step.sh")
	if err := os.WriteFile(c.script, []byte(stepScript), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.ledger, nil, 0o644); err != nil {
		return nil, err
	}
	if c.token, err = weftproc.CreateKey(ctx, bin, c.url, "model", "admin:*"); err != nil {
		return nil, err
	}
	c.env = append(c.env, "WEFT_TOKEN="+c.token)
	// Every workflow is registered before engines start.
	for name, tpl := range templates(c.script, c.ledger, c.lease) {
		path := filepath.Join(c.dir, name+".yaml")
		if err := os.WriteFile(path, []byte(tpl), 0o644); err != nil {
			return nil, err
		}
		if out, err := exec.CommandContext(ctx, bin, "register", path, "--db", c.url).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("weft register %s: %v\n%s", name, err, out)
		}
	}
	addr, err := weftproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	c.base = "http://" + addr
	c.serve = newProc("serve", c.env, append([]string{"serve", "--db", c.url, "--addr", addr, "--concurrency", strconv.Itoa(serveConcurrency)}, c.leaseFlags...)...)
	if err := c.serve.start(bin); err != nil {
		return nil, err
	}
	if err := weftproc.WaitHealthy(ctx, c.base, c.serve.Proc); err != nil {
		return nil, err
	}
	for i := range cfg.Workers {
		w := newProc(fmt.Sprintf("worker-%d", i+1), c.env, append([]string{"worker", "--db", c.url, "--concurrency", strconv.Itoa(workerConcurrency), "--drain", (4 * c.longStep()).String()}, c.leaseFlags...)...)
		if err := w.start(bin); err != nil {
			return nil, err
		}
		c.workers = append(c.workers, w)
	}
	if err := c.waitLive(ctx, cfg.Workers+1); err != nil {
		return nil, err
	}
	c.runs = &remoteRuns{ledger: c.ledger, active: map[string]bool{}}
	c.remote = &wireworker.Worker{Base: c.base, Token: c.token, Name: "model", Handler: "remote.work",
		Client: &http.Client{Timeout: 10 * time.Second}, Work: c.runs.work, Function: c.runs.drive}
	rctx, cancel := context.WithCancel(context.Background())
	c.rcancel, c.rdone = cancel, make(chan struct{})
	go func() { c.remote.Run(rctx); close(c.rdone) }()
	return c, nil
}

// longStep is how long the long steps run: twice the lease and a second,
// so that a graceful stop drains them well past it.
func (c *cluster) longStep() time.Duration { return longStep(c.lease) }

func longStep(lease time.Duration) time.Duration { return 2*lease + time.Second }

func (c *cluster) waitLive(ctx context.Context, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		es, err := c.st.ListEngines(ctx)
		if err == nil && len(es) >= n {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var tails []string
			for _, w := range c.workers {
				tails = append(tails, w.Name+":\n"+w.Tail(10))
			}
			return fmt.Errorf("%d of %d engines registered (%v)\n%s", len(es), n, err, strings.Join(tails, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// liveWorkers returns the `weft worker` processes running and not
// stopping.
func (c *cluster) liveWorkers() []*proc {
	var out []*proc
	for _, w := range c.workers {
		if !w.Exited() && !w.stopping {
			out = append(out, w)
		}
	}
	return out
}

// reap restarts the workers that exited after a graceful stop, and any
// process that exited unasked (reported to unasked, and restarted).
func (c *cluster) reap(unasked func(p *proc, state string)) error {
	for _, w := range append([]*proc{c.serve}, c.workers...) {
		if !w.Exited() {
			continue
		}
		if w.stopping {
			c.logf("%s (pid %d) exited after SIGTERM: restarting it", w.Name, w.PID())
		} else {
			unasked(w, w.ExitState())
		}
		if err := w.start(c.bin); err != nil {
			return err
		}
		if w == c.serve {
			if err := weftproc.WaitHealthy(context.Background(), c.base, c.serve.Proc); err != nil {
				return err
			}
		}
	}
	return nil
}

// alive reports whether a ledger runner is still running: the remote
// worker's runs it knows; an exec run is its shell's pid, alive while
// /proc shows it running the step script.
func (c *cluster) alive(runner string) bool {
	if strings.HasPrefix(runner, "r") {
		return c.runs.isActive(runner)
	}
	pid, err := strconv.Atoi(runner)
	if err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		if i := bytes.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
			return false // a zombie has ended
		}
	}
	return bytes.Contains(b, []byte(c.script))
}

func (c *cluster) close() {
	if c.rcancel != nil {
		c.rcancel()
		<-c.rdone
	}
	var wg sync.WaitGroup
	for _, w := range c.workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.Stop(10 * time.Second) }()
	}
	wg.Wait()
	if c.serve != nil {
		c.serve.Stop(10 * time.Second)
	}
	if c.st != nil {
		if c.schema != "" && c.db != nil && !c.cfg.KeepDir {
			_, _ = c.db.ExecContext(context.Background(), `DROP SCHEMA `+c.schema+` CASCADE`)
		}
		c.st.Close()
	}
	switch {
	case c.dir != "" && !c.cfg.KeepDir:
		_ = os.RemoveAll(c.dir)
	case c.dir != "":
		c.logf("kept %s (schema %q)", c.dir, c.schema)
	}
}

// The engines' slots: the model counts them to tell a ready step waiting
// for a slot from one no engine takes up.
const (
	serveConcurrency  = 2
	workerConcurrency = 6
)
