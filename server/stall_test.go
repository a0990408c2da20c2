package server_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
)

// TestStalledStreamDoesNotHoldShutdown: a client of the event stream that
// stops reading (its socket full) does not hold the stream, and with it
// the server's shutdown, for ever: once the server closes its streams, a
// write blocked on that client is cut within a moment.
func TestStalledStreamDoesNotHoldShutdown(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	en.register(grpcFlow)
	// Megabytes of history, more than the sockets between them hold.
	subs := make([]weft.Submission, 1000)
	for i := range subs {
		subs[i] = weft.Submission{Workflow: "shop/flow", Input: map[string]string{"pad": strings.Repeat("x", 1000)}}
	}
	for range 24 {
		_, err := en.e.SubmitMany(t.Context(), subs)
		require.NoError(t, err)
	}
	hs := httptest.NewServer(en.srv)
	ln := hs.Listener.Addr().String()
	// A client whose receive buffer is tiny and that reads nothing after
	// the headers.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.DialContext(t.Context(), "tcp", ln)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "GET /v1/events?after=start HTTP/1.1\r\nHost: weft\r\nAuthorization: Bearer %s\r\n\r\n", en.admin)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 16), nil)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)

	// The server's side of the connection holds what the client does not
	// read: once it holds megabytes and no longer grows, the stream's
	// writes block.
	server := hs.Listener.Addr().(*net.TCPAddr).Port
	client := conn.LocalAddr().(*net.TCPAddr).Port
	deadline := time.Now().Add(30 * time.Second)
	for last, still := 0, 0; still < 10; {
		require.True(t, time.Now().Before(deadline), "the server's send queue to the client never filled")
		time.Sleep(20 * time.Millisecond)
		q := sendQueue(t, server, client)
		if q >= 1<<20 && q == last {
			still++
		} else {
			still = 0
		}
		last = q
	}
	en.srv.CloseStreams()
	closed := make(chan struct{})
	go func() { hs.Close(); close(closed) }() // waits for every request's handler
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream's handler still writes to a client that reads nothing")
	}
}

// sendQueue is the bytes the socket from local port from to port to has
// not sent yet (Linux's /proc/net/tcp and tcp6); the test is skipped
// where it cannot be read.
func sendQueue(t *testing.T, from, to int) int {
	t.Helper()
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Skipf("no %s: %v", f, err)
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 5 {
				continue
			}
			if !strings.HasSuffix(fields[1], fmt.Sprintf(":%04X", from)) || !strings.HasSuffix(fields[2], fmt.Sprintf(":%04X", to)) {
				continue
			}
			tx, _, _ := strings.Cut(fields[4], ":")
			n, err := strconv.ParseInt(tx, 16, 64)
			require.NoError(t, err)
			return int(n)
		}
	}
	return 0
}
