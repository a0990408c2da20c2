package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// Event streams (GET /v1/events) follow the engine's history as
// Server-Sent Events. Each event's id is its history cursor, so a client
// that reconnects with Last-Event-ID resumes exactly after the last event
// it received. A stream checks its credential again every
// Options.CredentialRecheck and ends, with an error event, once the
// credential is no longer accepted.
const (
	// streamPoll is how often a stream looks for events written by other
	// engines; this engine's own work wakes it at once.
	streamPoll = 500 * time.Millisecond
	// streamKeepAlive is how often an idle stream sends a comment, so that
	// proxies and clients can tell a quiet stream from a dead one.
	streamKeepAlive = 15 * time.Second
	// streamBatch is how many events a stream reads at a time.
	streamBatch = 500
	// streamRetry is the reconnection delay the stream asks clients for.
	streamRetry = 2 * time.Second
)

// streamEvents serves GET /v1/events.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) {
	q, err := s.historyQuery(r)
	if err != nil {
		if sw, ok := w.(*statusWriter); ok && s.clientGone(sw, r, "GET /v1/events", err) {
			return
		}
		writeError(w, toAPIError(err))
		return
	}
	// A stream outlives the check its request passed: a revoked key, an
	// ended session or an expired token ends it (watchCredential).
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	go s.watchCredential(ctx, cancel, "GET /v1/events", func() *apiError { _, aerr := s.principal(r); return aerr })
	// Writes to a client that stops reading end (streamWrites).
	w, release := streamWrites(w, ctx.Done())
	defer release()
	rc := http.NewResponseController(w)
	wake := make(chan struct{}, 1)
	unsubscribe := s.engine.Subscribe(func(weft.Event) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	defer unsubscribe()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprintf(w, "retry: %d\n\n", streamRetry.Milliseconds()); err != nil {
		return
	}
	_ = rc.Flush()

	poll := time.NewTicker(streamPoll)
	defer poll.Stop()
	// ended says, when the stream ends because its credential was
	// refused, why, so that a page signs in again; the server closing its
	// streams, or the client gone, just end it (a client reconnects).
	ended := func() {
		var aerr *apiError
		if cause := context.Cause(ctx); errors.As(cause, &aerr) && aerr.Status == http.StatusUnauthorized {
			fmt.Fprintf(w, "event: error\ndata: %s\n\n", mustJSON(wire.ErrorBody{Error: wire.Error{Code: aerr.Code, Message: aerr.Message}}))
			_ = rc.Flush()
		}
	}
	lastWrite := time.Now()
	for {
		events, err := s.engine.History(ctx, q)
		if err != nil {
			ended()
			if ctx.Err() == nil {
				s.log.Warn("event stream: read history", "error", err)
				// The client reconnects with its Last-Event-ID.
				fmt.Fprintf(w, "event: error\ndata: %s\n\n", mustJSON(wire.ErrorBody{Error: wire.Error{Code: CodeUnavailable, Message: "reading the history failed; reconnect to resume"}}))
				_ = rc.Flush()
			}
			return
		}
		for _, ev := range events {
			data, err := json.Marshal(wire.EventOf(ev))
			if err != nil {
				s.log.Error("event stream: encode event", "error", err)
				return
			}
			if _, err := fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", ev.Cursor, ev.Type, data); err != nil {
				return
			}
			q.After = ev.Cursor
		}
		if len(events) > 0 {
			if rc.Flush() != nil {
				return
			}
			lastWrite = time.Now()
		}
		if len(events) == q.Limit {
			continue
		}
		if time.Since(lastWrite) >= streamKeepAlive {
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
			lastWrite = time.Now()
		}
		select {
		case <-ctx.Done():
			ended()
			return
		case <-wake:
		case <-poll.C:
		}
	}
}

// historyQuery reads a stream's filters and where it starts: after the
// Last-Event-ID a reconnecting client sends, else after the `after`
// parameter (a cursor, or "start" for the oldest event retained), else
// from now.
func (s *Server) historyQuery(r *http.Request) (weft.HistoryQuery, error) {
	return s.historyQueryOf(r.Context(), r.URL.Query(), r.Header.Get("Last-Event-ID"))
}

// historyQueryOf is historyQuery for any transport: the filters as query
// parameters, and the cursor a reconnecting client resumes after.
func (s *Server) historyQueryOf(ctx context.Context, v url.Values, lastEventID string) (weft.HistoryQuery, error) {
	q := weft.HistoryQuery{Namespace: v.Get("namespace"), Workflow: v.Get("workflow"), Namespaces: scopeFrom(ctx).Filter(), Limit: streamBatch}
	var err error
	if q.Namespace, q.Workflow, err = workflow.ParseFilter(q.Namespace, q.Workflow); err != nil {
		return q, err
	}
	if t := v.Get("task"); t != "" {
		id, err := strconv.ParseInt(t, 10, 64)
		if err != nil || id <= 0 {
			return q, fieldError("task", "must be a task id, got %q", t)
		}
		q.TaskID = id
	}
	after := lastEventID
	field := "Last-Event-ID"
	if after == "" {
		after, field = v.Get("after"), "after"
	}
	switch after {
	case "":
		end, err := s.engine.HistoryEnd(ctx)
		if err != nil {
			return q, err
		}
		q.After = end
	case "start":
	default:
		q.After = after
	}
	// Check the filters and the cursor now, while an error can still be
	// an error response.
	probe := q
	probe.Limit, probe.CheckAfter = 1, true
	if _, err := s.engine.History(ctx, probe); err != nil {
		if errors.Is(err, weft.ErrInvalid) {
			return q, fieldError(field, "%q is not an event id this server handed out (from before the database was restored or replaced?): reconnect without it, or with after=start", after)
		}
		return q, err
	}
	return q, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// CloseStreams ends the open event streams, whose clients reconnect (to
// this server once it is back, or another) with Last-Event-ID. Call it
// when the HTTP server shuts down (http.Server.RegisterOnShutdown): a
// stream never goes idle on its own. Close calls it too.
func (s *Server) CloseStreams() {
	s.closeOnce.Do(func() { close(s.closing) })
}
