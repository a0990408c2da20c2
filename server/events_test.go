package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

const addTemplate = "namespace: ev\nname: add\nversion: \"1\"\nsteps:\n  - name: a\n    handler: go.add\n  - name: b\n    handler: go.add\n    depends_on: [a]\n"

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct {
	id, event string
	data      wire.Event
}

// openStream opens GET path as a stream, sending lastID as Last-Event-ID.
func (en *env) openStream(ctx context.Context, path, lastID string) (*http.Response, *bufio.Scanner) {
	en.t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", en.url+path, nil)
	require.NoError(en.t, err)
	req.Header.Set("Authorization", "Bearer "+en.admin)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(en.t, err)
	require.Equal(en.t, 200, resp.StatusCode)
	require.Equal(en.t, "text/event-stream", resp.Header.Get("Content-Type"))
	return resp, bufio.NewScanner(resp.Body)
}

// next reads the next event of a stream (skipping comments and retry).
func next(t *testing.T, sc *bufio.Scanner) sseEvent {
	t.Helper()
	var ev sseEvent
	var data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && data != "":
			require.NoError(t, json.Unmarshal([]byte(data), &ev.data))
			return ev
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
	t.Fatalf("stream ended: %v", sc.Err())
	return ev
}

// TestEventStreamResumes: a client whose connection is cut mid-stream
// reconnects with Last-Event-ID and, across both connections, receives
// every transition of the tasks exactly once, in order.
func TestEventStreamResumes(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register(addTemplate)
		var ids []int64
		submit := func(n int) {
			for i := 0; i < n; i++ {
				var task wire.Task
				en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "ev/add", "input": map[string]int{"n": i}}, &task)
				ids = append(ids, task.ID)
			}
		}
		submit(5)

		ctx, cut := context.WithCancel(t.Context())
		resp, sc := en.openStream(ctx, "/v1/events?namespace=ev&after=start", "")
		seen := map[int64]int{}
		var last sseEvent
		for i := 0; i < 6; i++ {
			last = next(t, sc)
			require.Equal(t, last.id, last.data.Cursor, "the SSE id is the cursor")
			require.Equal(t, last.event, last.data.Type)
			seen[last.data.ID]++
		}
		cut() // the connection drops mid-stream
		resp.Body.Close()
		submit(5) // and work goes on meanwhile
		for _, id := range ids {
			en.waitTask(id)
		}
		want := 0
		for _, id := range ids {
			var trail wire.AuditList
			en.ok(200, "GET", "/v1/tasks/"+itoa(id)+"/audit", nil, &trail)
			want += len(trail.Audit)
		}

		resp, sc = en.openStream(t.Context(), "/v1/events?namespace=ev&after=start", last.id)
		defer resp.Body.Close()
		for len(seen) < want {
			ev := next(t, sc)
			seen[ev.data.ID]++
			require.Equal(t, "ev", ev.data.Namespace)
		}
		for id, n := range seen {
			require.Equal(t, 1, n, "audit entry %d delivered once", id)
		}
	})
}

// TestEventStreamFilters: filters and starting points, and the errors of
// a bad request.
func TestEventStreamFilters(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register(addTemplate)
		var a, b wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "ev/add"}, &a)
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "ev/add"}, &b)
		en.waitTask(a.ID)
		en.waitTask(b.ID)

		resp, sc := en.openStream(t.Context(), "/v1/events?after=start&task="+itoa(b.ID), "")
		defer resp.Body.Close()
		types := map[string]bool{}
		for ev := next(t, sc); ; ev = next(t, sc) {
			require.Equal(t, b.ID, ev.data.TaskID)
			types[ev.event] = true
			if types["task.submitted"] && types["task.completed"] && types["step.completed"] {
				break
			}
		}

		reader := en.key(server.PermTasksRead)
		nobody := en.key(server.PermWorkflowsRead)
		for _, tc := range []struct {
			path, token string
			status      int
			field       string
		}{
			{"/v1/events?after=nonsense", reader, 400, "after"},
			{"/v1/events?after=9223372036854775807", reader, 400, "after"}, // beyond the newest event
			{"/v1/events?after=999999999.5", reader, 400, "after"},
			{"/v1/events?after=%2B2", reader, 400, "after"}, // "+2": not as handed out
			{"/v1/events?after=02", reader, 400, "after"},
			{"/v1/events?task=x", reader, 400, "task"},
			{"/v1/events?workflow=a/b/c", reader, 400, "workflow"},
			{"/v1/events?colour=red", reader, 400, "colour"},
			{"/v1/events", nobody, 403, ""},
			{"/v1/events", "", 401, ""},
		} {
			r := en.do("GET", tc.path, tc.token, nil)
			require.Equal(t, tc.status, r.status, "%s: %s", tc.path, r.body)
			_, field := r.errorCode(t)
			require.Equal(t, tc.field, field, tc.path)
		}
	})
}

// TestClientFollowReconnects: the Go client's Follow, behind a proxy that
// cuts its first connections short, delivers every event once and stops
// when its callback says so.
func TestClientFollowReconnects(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register(addTemplate)
		var ids []int64
		for i := 0; i < 4; i++ {
			var task wire.Task
			en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "ev/add"}, &task)
			ids = append(ids, task.ID)
		}
		want := 0
		for _, id := range ids {
			en.waitTask(id)
			var trail wire.AuditList
			en.ok(200, "GET", "/v1/tasks/"+itoa(id)+"/audit", nil, &trail)
			want += len(trail.Audit)
		}

		target, err := url.Parse(en.url)
		require.NoError(t, err)
		var conns atomic.Int32
		proxy := httputil.NewSingleHostReverseProxy(target)
		proxy.FlushInterval = -1
		proxy.ModifyResponse = func(r *http.Response) error {
			if conns.Add(1) <= 3 {
				r.Body = &cutAfter{rc: r.Body, n: 700} // cut mid-event
			}
			return nil
		}
		ps := httptest.NewServer(proxy)
		t.Cleanup(ps.Close)

		c, err := client.New(ps.URL, en.admin)
		require.NoError(t, err)
		seen := map[int64]int{}
		stop := errors.New("enough")
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		err = c.Follow(ctx, client.EventFilter{Namespace: "ev", After: "start"}, func(ev client.Event) error {
			seen[ev.ID]++
			if len(seen) == want {
				return stop
			}
			return nil
		})
		require.ErrorIs(t, err, stop)
		require.GreaterOrEqual(t, conns.Load(), int32(4), "the proxy cut three connections")
		for id, n := range seen {
			require.Equal(t, 1, n, "event %d once", id)
		}

		_, err = c.Step(t.Context(), 1) // the client still works for other calls
		require.NoError(t, err)
		err = c.Follow(t.Context(), client.EventFilter{After: "nonsense"}, func(client.Event) error { return nil })
		require.ErrorIs(t, err, store.ErrInvalid, "a bad cursor is final")
	})
}

// cutAfter ends a body after n bytes, as a dropped connection would.
type cutAfter struct {
	rc io.ReadCloser
	n  int
}

func (c *cutAfter) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	if len(p) > c.n {
		p = p[:c.n]
	}
	n, err := c.rc.Read(p)
	c.n -= n
	return n, err
}

func (c *cutAfter) Close() error { return c.rc.Close() }
