package model

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/weftrun/weft/internal/wireworker"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/weftdb"
)

// The cluster the model drives: `weft worker` engines, one `weft serve`
// (with its own engine, and the REST API the operator actions go through),
// and a remote worker in this process speaking the wire protocol.

// proc is one weft process of the cluster.
type proc struct {
	name   string
	args   []string
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan struct{} // closed once the process exited and was reaped
	// stopping: SIGTERM sent; the driver restarts it once it has exited.
	stopping bool
}

func (p *proc) start(bin string, env []string) error {
	p.stderr = &bytes.Buffer{}
	p.cmd = exec.Command(bin, p.args...)
	p.cmd.Env = env
	p.cmd.Stderr = &lockedWriter{b: p.stderr}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.done = make(chan struct{})
	p.stopping = false
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(p.cmd, p.done)
	return nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and waits up to d for the process to exit, then kills it.
func (p *proc) stop(d time.Duration) {
	if p.cmd == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

type lockedWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.b.Len() > 1<<20 { // keep the tail only
		w.b.Next(w.b.Len() - 1<<19)
	}
	return w.b.Write(p)
}

func (p *proc) tail(n int) string {
	lw, ok := p.cmd.Stderr.(*lockedWriter)
	if !ok {
		return ""
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lines := strings.Split(strings.TrimRight(lw.b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cluster is the running system under test.
type cluster struct {
	cfg     Config
	dir     string
	bin     string
	url     string // the database, as the processes use it
	schema  string // postgres: the run's own schema
	st      store.Store
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

// buildBinary builds cmd/weft into dir.
func buildBinary(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "weft")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/weft")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
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
		c.url = withParam(cfg.DB, "search_path", c.schema)
	default:
		return nil, fmt.Errorf("--store must be sqlite or postgres, not %q", cfg.Store)
	}
	// The schema is applied before any engine works.
	c.st, err = weftdb.Open(ctx, c.url, weftdb.Options{})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", weftdb.Redact(c.url), err)
	}
	c.env = append(os.Environ(), "WEFT_LOG_LEVEL=warn")
	c.ledger = filepath.Join(c.dir, "ledger")
	c.script = filepath.Join(c.dir, "step.sh")
	if err := os.WriteFile(c.script, []byte(stepScript), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.ledger, nil, 0o644); err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, bin, "keys", "create", "--db", c.url, "--name", "model", "--permissions", "admin:*").Output()
	if err != nil {
		return nil, fmt.Errorf("weft keys create: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	c.token = strings.TrimSpace(lines[len(lines)-1])
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
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	c.base = "http://" + addr
	c.serve = &proc{name: "serve", args: append([]string{"serve", "--db", c.url, "--addr", addr, "--concurrency", strconv.Itoa(serveConcurrency)}, c.leaseFlags...)}
	if err := c.serve.start(bin, c.env); err != nil {
		return nil, err
	}
	if err := c.waitHealthy(ctx); err != nil {
		return nil, err
	}
	for i := range cfg.Workers {
		w := &proc{name: fmt.Sprintf("worker-%d", i+1), args: append([]string{"worker", "--db", c.url, "--concurrency", strconv.Itoa(workerConcurrency), "--drain", (4 * c.longStep()).String()}, c.leaseFlags...)}
		if err := w.start(bin, c.env); err != nil {
			return nil, err
		}
		c.workers = append(c.workers, w)
	}
	if err := c.waitLive(ctx, cfg.Workers+1); err != nil {
		return nil, err
	}
	c.runs = &remoteRuns{ledger: c.ledger, active: map[string]bool{}}
	c.remote = &wireworker.Worker{Base: c.base, Token: c.token, Name: "model", Handler: "remote.work",
		Client: &http.Client{Timeout: 10 * time.Second}, Work: c.runs.work}
	rctx, cancel := context.WithCancel(context.Background())
	c.rcancel, c.rdone = cancel, make(chan struct{})
	go func() { c.remote.Run(rctx); close(c.rdone) }()
	return c, nil
}

// longStep is how long the long steps run: twice the lease and a second,
// so that a graceful stop drains them well past it.
func (c *cluster) longStep() time.Duration { return longStep(c.lease) }

func longStep(lease time.Duration) time.Duration { return 2*lease + time.Second }

func (c *cluster) waitHealthy(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.http.Get(c.base + "/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil || c.serve.exited() {
			return fmt.Errorf("weft serve did not come up on %s:\n%s", c.base, c.serve.tail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

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
				tails = append(tails, w.name+":\n"+w.tail(10))
			}
			return fmt.Errorf("%d of %d engines registered (%v)\n%s", len(es), n, err, strings.Join(tails, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// enginePIDs returns the pids of the weft processes running (serve and
// workers, not those stopping): the engines that serve exec steps.
func (c *cluster) liveWorkers() []*proc {
	var out []*proc
	for _, w := range c.workers {
		if !w.exited() && !w.stopping {
			out = append(out, w)
		}
	}
	return out
}

// reap restarts the workers that exited after a graceful stop, and any
// process that exited unasked (reported to unasked, and restarted).
func (c *cluster) reap(unasked func(p *proc, state string)) error {
	for _, w := range append([]*proc{c.serve}, c.workers...) {
		if !w.exited() {
			continue
		}
		if w.stopping {
			c.logf("%s (pid %d) exited after SIGTERM: restarting it", w.name, w.pid())
		} else {
			unasked(w, w.cmd.ProcessState.String())
		}
		if err := w.start(c.bin, c.env); err != nil {
			return err
		}
		if w == c.serve {
			if err := c.waitHealthy(context.Background()); err != nil {
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
		go func() { defer wg.Done(); w.stop(10 * time.Second) }()
	}
	wg.Wait()
	if c.serve != nil {
		c.serve.stop(10 * time.Second)
	}
	if c.st != nil {
		if c.schema != "" && !c.cfg.KeepDir {
			if dbs, ok := c.st.(interface{ DB() *sqlDB }); ok {
				_, _ = dbs.DB().ExecContext(context.Background(), `DROP SCHEMA `+c.schema+` CASCADE`)
			}
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

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func withParam(u, key, value string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + key + "=" + url.QueryEscape(value)
}

// Build builds cmd/weft from the repository at root into dir and returns
// the binary's path.
func Build(ctx context.Context, root, dir string) (string, error) { return buildBinary(ctx, root, dir) }
