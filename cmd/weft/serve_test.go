package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/wire/weftv1"
	"github.com/weftrun/weft/wire/weftv1/weftv1connect"
)

// startServe runs `weft serve` as a real process on a free loopback port
// and returns its URL. The process gets SIGTERM when the test ends, unless
// the test stopped it; stop sends it and waits for the exit status.
func startServe(t *testing.T, db string, args ...string) (url string, stop func() error) {
	t.Helper()
	p := startServeProcess(t, db, args...)
	return p.url, p.stop
}

// serveProcess is a running `weft serve`.
type serveProcess struct {
	url  string
	cmd  *exec.Cmd
	stop func() error // SIGTERM, then the exit status
	logs *syncBuffer  // its standard error so far
}

func startServeProcess(t *testing.T, db string, args ...string) *serveProcess {
	t.Helper()
	return startServing(t, db, "serve", args...)
}

// startServing runs `weft serve` or `weft ui` on a free loopback port.
func startServing(t *testing.T, db, command string, args ...string) *serveProcess {
	t.Helper()
	bin, err := buildWeft()
	require.NoError(t, err)
	cmd := exec.Command(bin, append([]string{"--db", db, command, "--addr", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	found := make(chan string, 1)
	logs := &syncBuffer{}
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`serving on (https?://[^\s"]+)`)
		for sc.Scan() {
			logs.Write([]byte(sc.Text() + "\n"))
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		return waitErr
	}
	t.Cleanup(func() { _ = stop() })
	p := &serveProcess{cmd: cmd, stop: stop, logs: logs}
	select {
	case p.url = <-found:
	case <-exited:
		t.Fatalf("weft serve exited: %v\n%s", waitErr, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("weft serve did not start:\n%s", logs.String())
	}
	return p
}

// createKey makes an API key on db with `weft keys create` and returns
// its token, which the command prints on its last line.
func createKey(t *testing.T, db, name, permissions string) string {
	t.Helper()
	r := weftCLI(t, "--db", db, "keys", "create", "--name", name, "--permissions", permissions)
	requireCode(t, 0, r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	return lines[len(lines)-1]
}

// TestServeAndClientMode runs `weft serve` and drives it with the CLI in
// client mode: validate, submit, tasks, task, cancel and retry go through
// the API, authenticated with a key made by `weft keys create`.
func TestServeAndClientMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	r := weftCLI(t, "--db", db, "keys", "create", "--name", "cli", "--permissions", "tasks:*,workflows:*")
	requireCode(t, 0, r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	token := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(token, "weft_"), "the key is on the last line: %q", r.stdout)
	requireCode(t, 2, weftCLI(t, "--db", db, "keys", "create", "--name", "x", "--permissions", "tasks:fly"))

	r = weftCLI(t, "--db", db, "keys", "list")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "cli")
	require.NotContains(t, r.stdout, token[len("weft_")+17:], "the secret is never listed")

	url, stop := startServe(t, db)
	hello := filepath.Join("..", "..", "examples", "hello.yaml")
	as := func(args ...string) result {
		return weftCLI(t, append([]string{"--server", url, "--token", token}, args...)...)
	}

	r = as("validate", hello)
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "ok (examples/hello@1, 4 steps)")
	bad := writeFile(t, dir, "bad.yaml", "namespace: x\nname: y\nversion: \"1\"\nsteps:\n  - name: a\n    handler: exec\n    colour: red\n")
	r = as("validate", bad)
	requireCode(t, 2, r)
	require.Contains(t, r.stderr, bad+":7:")

	r = as("submit", hello, "--input", `{"name":"Ada"}`, "--key", "ada")
	requireCode(t, 0, r)
	id, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
	require.NoError(t, err, r.stdout)
	r = as("submit", "examples/hello", "--input", `{"name":"Ada"}`, "--key", "ada")
	requireCode(t, 0, r)
	require.Equal(t, strconv.FormatInt(id, 10), strings.TrimSpace(r.stdout))
	require.Contains(t, r.stderr, "already existed")

	var task wire.Task
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = as("task", strconv.FormatInt(id, 10), "--json")
		requireCode(t, 0, r)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &task))
		if task.State.Terminal() || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, state.TaskCompleted, task.State, "weft serve ran the exec steps")
	require.JSONEq(t, `{"message": "HELLO, ADA! (10 characters)"}`, string(stepByName(t, &task, "report").Result))

	r = as("tasks", "--json")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, `"id": `+strconv.FormatInt(id, 10))
	r = as("task", strconv.FormatInt(id, 10), "--audit")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "every step finished")

	// A conflict reads the same through the server as on the database:
	// the reason alone.
	r = as("cancel", strconv.FormatInt(id, 10))
	requireCode(t, 1, r)
	require.Equal(t, "weft: task "+strconv.FormatInt(id, 10)+" is completed and cannot be cancelled\n", r.stderr)
	r = as("retry", strconv.FormatInt(id, 10))
	requireCode(t, 1, r)
	require.Equal(t, "weft: task "+strconv.FormatInt(id, 10)+" is completed, only failed tasks can be retried\n", r.stderr)
	parked := writeFile(t, dir, "parked.yaml", "namespace: ops\nname: parked\nversion: \"1\"\nsteps:\n  - name: s\n    handler: nobody.serves.this\n")
	r = as("submit", parked)
	requireCode(t, 0, r)
	pid := strings.TrimSpace(r.stdout)
	requireCode(t, 0, as("cancel", pid, "--reason", "wrong input"))
	require.Equal(t, "wrong input", taskAuditRow(t, as("task", pid, "--json", "--audit"), "cancelled", "api:cli"))
	r = as("task", "424242")
	requireCode(t, 1, r)
	require.Contains(t, r.stderr, "not found")

	r = weftCLI(t, "--server", url, "tasks")
	requireCode(t, 1, r)
	require.Contains(t, r.stderr, "no credentials")
	requireCode(t, 2, weftCLI(t, "--server", "ftp://nowhere", "tasks"))

	keyID := strings.Split(token, "_")[1]
	requireCode(t, 0, weftCLI(t, "--db", db, "keys", "revoke", keyID))
	r = as("tasks")
	requireCode(t, 1, r)
	require.Contains(t, r.stderr, "not accepted")

	require.NoError(t, stop(), "SIGTERM stops weft serve gracefully")
}

func TestServeRejects(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "weft.db")
	for _, args := range [][]string{
		{"--addr", "nowhere"},
		{"--addr", ":99999"},
		{"--metrics-addr", "127.0.0.1:65536"},
		{"--jwt-issuer", "x"},
		{"--jwt-issuer", "x", "--jwt-audience", "y"},
		{"--max-backlog", "-1"},
		{"--tls-cert", "cert.pem"},
		{"--tls-key", "key.pem"},
		{"--tls-cert", "missing.pem", "--tls-key", "missing-key.pem"},
		{"--trusted-proxy", "not-an-address"},
		{"--trusted-proxy", "10.0.0.0/33"},
	} {
		requireCode(t, 2, weftCLI(t, append([]string{"--db", db, "serve"}, args...)...))
	}
}

// TestServeTLS: with --tls-cert and --tls-key weft serve answers HTTPS, and
// the dashboard's session cookie is Secure.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	requireCode(t, 0, weftCLI(t, "--db", db, "migrate"))
	r := weftCLI(t, "--db", db, "keys", "create", "--name", "ops", "--permissions", "tasks:read")
	requireCode(t, 0, r)
	token := regexp.MustCompile(`weft_[0-9a-f]{16}_[A-Za-z0-9_-]+`).FindString(r.stdout)
	require.NotEmpty(t, token, r.stdout)

	url, _ := startServe(t, db, "--tls-cert", certFile, "--tls-key", keyFile)
	require.True(t, strings.HasPrefix(url, "https://"), url)
	pool := x509.NewCertPool()
	pool.AddCert(must(x509.ParseCertificate(der)))
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.PostForm(url+"/signin", neturl.Values{"key": {token}, "next": {"/tasks"}})
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	var secure bool
	for _, ck := range res.Cookies() {
		secure = secure || ck.Secure
	}
	require.True(t, secure, "the session cookie is Secure over HTTPS")
	res, err = http.Get(strings.Replace(url, "https://", "http://", 1) + "/health/live")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusBadRequest, res.StatusCode, "plain HTTP is not served beside it")

	// gRPC, which needs HTTP/2, is served over the same TLS port.
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	tasks := weftv1connect.NewTaskServiceClient(h2, url, connect.WithGRPC())
	req := connect.NewRequest(&weftv1.ListTasksRequest{})
	req.Header().Set("Authorization", "Bearer "+token)
	_, err = tasks.ListTasks(t.Context(), req)
	require.NoError(t, err, "gRPC over TLS")
}

// TestServeGRPC: weft serve answers gRPC over cleartext HTTP/2 on its
// address, as grpcurl -plaintext speaks it, with a key's credential.
func TestServeGRPC(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "weft.db")
	requireCode(t, 0, weftCLI(t, "--db", db, "migrate"))
	r := weftCLI(t, "--db", db, "keys", "create", "--name", "ops", "--permissions", "tasks:read")
	requireCode(t, 0, r)
	token := regexp.MustCompile(`weft_[0-9a-f]{16}_[A-Za-z0-9_-]+`).FindString(r.stdout)
	url, _ := startServe(t, db)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tasks := weftv1connect.NewTaskServiceClient(&http.Client{Transport: &http.Transport{Protocols: &p}}, url, connect.WithGRPC())
	tests := []struct {
		name  string
		token string
		code  connect.Code
	}{
		{"with the key", token, 0},
		{"without a credential", "", connect.CodeUnauthenticated},
	}
	for _, tt := range tests {
		req := connect.NewRequest(&weftv1.ListTasksRequest{})
		if tt.token != "" {
			req.Header().Set("Authorization", "Bearer "+tt.token)
		}
		_, err := tasks.ListTasks(t.Context(), req)
		if tt.code == 0 {
			require.NoError(t, err, tt.name)
		} else {
			require.Equal(t, tt.code, connect.CodeOf(err), "%s: %v", tt.name, err)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestScopedKeys: `weft keys create --namespaces` makes a key that acts in
// those namespaces alone through the server, `weft keys list` shows where
// each permission holds, and a mistake in a grant is a usage error.
func TestScopedKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	keyOf := func(r result) string {
		requireCode(t, 0, r)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		return lines[len(lines)-1]
	}
	scoped := keyOf(weftCLI(t, "--db", db, "keys", "create", "--name", "examples-team", "--permissions", "tasks:*,workflows:*", "--namespaces", "examples"))
	admin := keyOf(weftCLI(t, "--db", db, "keys", "create", "--name", "ops", "--permissions", "admin:*"))
	for _, bad := range []struct{ args []string }{
		{[]string{"--permissions", "tasks:read", "--namespaces", "bad name"}},
		{[]string{"--permissions", "tasks:read", "--namespaces", "*,shop"}},
		{[]string{"--permissions", "tasks:read@"}},
		{[]string{"--permissions", "shop,tasks:read"}},
		{[]string{"--permissions", "tasks:read@shop,shop"}},
	} {
		r := weftCLI(t, append([]string{"--db", db, "keys", "create", "--name", "x"}, bad.args...)...)
		requireCode(t, 2, r)
		require.NotEmpty(t, r.stderr)
	}
	r := weftCLI(t, "--db", db, "keys", "list")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "tasks:*@examples workflows:*@examples")
	require.Contains(t, r.stdout, "admin:*")

	url, stop := startServe(t, db)
	as := func(token string, args ...string) result {
		return weftCLI(t, append([]string{"--server", url, "--token", token}, args...)...)
	}
	hello := filepath.Join("..", "..", "examples", "hello.yaml")
	parked := writeFile(t, dir, "parked.yaml", "namespace: ops\nname: parked\nversion: \"1\"\nsteps:\n  - name: s\n    handler: nobody.serves.this\n")
	r = as(scoped, "submit", hello, "--input", `{"name":"Ada"}`)
	requireCode(t, 0, r)
	mine := strings.TrimSpace(r.stdout)
	r = as(scoped, "submit", parked)
	requireCode(t, 1, r)
	require.Contains(t, r.stderr, `namespace "ops" is outside this credential's namespaces (examples)`)
	r = as(admin, "submit", parked)
	requireCode(t, 0, r)
	theirs := strings.TrimSpace(r.stdout)

	r = as(scoped, "task", theirs)
	requireCode(t, 1, r)
	require.Contains(t, r.stderr, "not found")
	r = as(scoped, "cancel", theirs)
	requireCode(t, 1, r)
	require.Contains(t, r.stderr, "not found")
	requireCode(t, 0, as(scoped, "task", mine))
	r = as(scoped, "tasks", "--json")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, `"id": `+mine)
	require.NotContains(t, r.stdout, `"namespace": "ops"`)
	r = as(admin, "tasks", "--json")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, `"namespace": "ops"`)
	require.NoError(t, stop())
}
