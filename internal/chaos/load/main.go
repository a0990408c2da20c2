// Command load drives a `weft serve` on SQLite through its REST API (see
// scripts/load and docs/reliability.md): N concurrent clients each loop on
// submit, get and list for a fixed time, on loopback only. It reports
// throughput, p50/p99 latency per operation, the count of responses by
// status class (a 5xx other than 503 is a failure) and the server's RSS at
// start and end.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The workflow waits for a signal that never comes: every task is one row
// and one waiting step, so the run measures the API and the database, not
// the processes an exec step would fork.
const workflow = `namespace: load
name: wait
version: "1"
steps:
  - name: approve
    type: signal
    signal: {name: go, timeout: 1h}
`

func main() {
	clients := flag.Int("clients", 32, "concurrent clients")
	dur := flag.Duration("duration", 60*time.Second, "how long the clients run")
	flag.Parse()
	if err := run(*clients, *dur); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
}

type sample struct {
	op     string
	d      time.Duration
	status int
}

func run(clients int, dur time.Duration) error {
	dir, err := os.MkdirTemp("", "weft-load-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "weft")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/weft").CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	db := filepath.Join(dir, "load.db")
	out, err := exec.Command(bin, "keys", "create", "--db", db, "--name", "load",
		"--permissions", "tasks:create,tasks:read,workflows:write").Output()
	if err != nil {
		return fmt.Errorf("weft keys create: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	token := strings.TrimSpace(lines[len(lines)-1])

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	var stderr bytes.Buffer
	srv := exec.Command(bin, "serve", "--db", db, "--addr", addr)
	srv.Stderr = &stderr
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() {
		if srv.ProcessState == nil {
			_ = srv.Process.Kill()
			_ = srv.Wait()
		}
	}()
	base := "http://" + addr
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients * 2}, Timeout: 30 * time.Second}
	do := func(method, path string, body any) (int, []byte, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, base+path, rd)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		return resp.StatusCode, data, err
	}
	ready := time.Now().Add(30 * time.Second)
	for {
		if st, _, err := do("GET", "/health/ready", nil); err == nil && st == 200 {
			break
		}
		if time.Now().After(ready) {
			return fmt.Errorf("the server did not become ready:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, body, err := do("POST", "/v1/workflows", map[string]string{"template": workflow}); err != nil || st >= 300 {
		return fmt.Errorf("register: %d %s %v", st, body, err)
	}
	rssStart := rss(srv.Process.Pid)

	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	results := make([][]sample, clients)
	var wg sync.WaitGroup
	began := time.Now()
	for c := range clients {
		wg.Go(func() {
			timed := func(op, method, path string, body any) []byte {
				t0 := time.Now()
				st, data, err := do(method, path, body)
				if err != nil {
					st = -1
				}
				results[c] = append(results[c], sample{op, time.Since(t0), st})
				return data
			}
			for i := 0; ctx.Err() == nil; i++ {
				data := timed("submit", "POST", "/v1/tasks", map[string]any{"workflow": "load/wait", "input": map[string]int{"client": c, "i": i}})
				var task struct {
					ID int64 `json:"id"`
				}
				if json.Unmarshal(data, &task) == nil && task.ID > 0 {
					timed("get", "GET", "/v1/tasks/"+strconv.FormatInt(task.ID, 10), nil)
				}
				timed("list", "GET", "/v1/tasks?limit=20", nil)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	rssEnd := rss(srv.Process.Pid)
	_ = srv.Process.Signal(syscall.SIGTERM)
	_ = srv.Wait()

	byOp := map[string][]time.Duration{}
	classes := map[string]int{}
	var all []time.Duration
	bad5xx := 0
	for _, rs := range results {
		for _, s := range rs {
			byOp[s.op] = append(byOp[s.op], s.d)
			all = append(all, s.d)
			switch {
			case s.status < 0:
				classes["transport error"]++
			case s.status == 503:
				classes["503"]++
			case s.status >= 500:
				classes["5xx (not 503)"]++
				bad5xx++
			default:
				classes[fmt.Sprintf("%dxx", s.status/100)]++
			}
		}
	}
	fmt.Printf("load: %d clients for %s on SQLite, loopback; %d requests, %.0f req/s (%d submits, %.0f/s)\n",
		clients, elapsed.Round(time.Millisecond), len(all), float64(len(all))/elapsed.Seconds(), len(byOp["submit"]), float64(len(byOp["submit"]))/elapsed.Seconds())
	for _, op := range []string{"submit", "get", "list"} {
		fmt.Printf("load: %-6s n=%d p50=%s p99=%s max=%s\n", op, len(byOp[op]), pct(byOp[op], 50), pct(byOp[op], 99), pct(byOp[op], 100))
	}
	fmt.Printf("load: all    p50=%s p99=%s\n", pct(all, 50), pct(all, 99))
	fmt.Printf("load: responses %v\n", classes)
	fmt.Printf("load: server RSS start=%s end=%s\n", rssStart, rssEnd)
	if bad5xx > 0 || classes["transport error"] > 0 {
		return fmt.Errorf("%d 5xx responses other than 503, %d transport errors", bad5xx, classes["transport error"])
	}
	return nil
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := max(0, min((p*len(s)+99)/100-1, len(s)-1))
	return s[i].Round(10 * time.Microsecond)
}

// rss returns a process's resident set size from /proc.
func rss(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "?"
}
