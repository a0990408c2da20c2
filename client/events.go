package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/outbound"
	"github.com/weftrun/weft/wire"
)

// Event is one event of the server's event stream.
type Event = wire.Event

// EventFilter selects the events to follow. Zero values match everything.
type EventFilter struct {
	Namespace string
	Workflow  string // NAMESPACE/NAME, or NAME (see workflow.ParseFilter)
	TaskID    int64
	// After is the cursor of the last event handled (Event.Cursor): the
	// stream starts after it. "" starts from now; "start" from the oldest
	// event the server retains.
	After string
}

// reconnectDelay bounds the wait between reconnections of Follow.
const (
	reconnectMin = 200 * time.Millisecond
	reconnectMax = 5 * time.Second
)

// Follow streams events (GET /v1/events) to fn, in the history's order,
// until ctx is done or fn returns an error, which Follow returns. A
// dropped connection is re-established with the last event's cursor, so no
// event still retained is missed or repeated, and so is one the server or
// a proxy in front of it answers with 503, 429, 502 or 504 (restarting).
// Other errors the server answers with (a bad filter, a refused
// credential), an answer that is not an event stream, and a first
// connection that fails end Follow at once.
func (c *Client) Follow(ctx context.Context, f EventFilter, fn func(Event) error) error {
	q := url.Values{}
	if f.Namespace != "" {
		q.Set("namespace", f.Namespace)
	}
	if f.Workflow != "" {
		q.Set("workflow", f.Workflow)
	}
	if f.TaskID != 0 {
		q.Set("task", strconv.FormatInt(f.TaskID, 10))
	}
	if f.After != "" {
		q.Set("after", f.After)
	}
	path := "/v1/events"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	// Streams last: no overall timeout, only one for the answer's headers,
	// which the server sends at once (a server that never answers is not
	// waited for without end).
	tr := outbound.Transport()
	tr.ResponseHeaderTimeout = time.Minute
	hc := &http.Client{Transport: tr, CheckRedirect: c.http.CheckRedirect}
	defer tr.CloseIdleConnections()
	last := ""
	delay := reconnectMin
	for connected := false; ; {
		got, err := c.stream(ctx, hc, path, last, &connected, func(ev Event) error {
			last = ev.Cursor
			return fn(ev)
		})
		var apiErr *Error
		var fnErr callbackError
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &fnErr):
			return fnErr.err
		case errors.As(err, &apiErr) && !reconnects(apiErr):
			return err
		case !connected:
			return err
		}
		if got {
			delay = reconnectMin
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, reconnectMax)
	}
}

// callbackError carries the error of Follow's fn out of stream.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }

// stream reads one connection's events, resuming after last, until it
// ends. It reports whether any event arrived, and sets connected once the
// server accepted the stream.
func (c *Client) stream(ctx context.Context, hc *http.Client, path, last string, connected *bool, fn func(Event) error) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		return false, fmt.Errorf("events: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("GET %s: %w", c.base+path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return false, responseError(resp.StatusCode, "GET", path, data)
	}
	if err := c.notOfType(resp, "GET", path, "text/event-stream"); err != nil {
		return false, err
	}
	*connected = true
	got := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var event string
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if data.Len() > 0 && event != "error" {
				var ev Event
				if err := json.Unmarshal([]byte(data.String()), &ev); err != nil {
					return got, fmt.Errorf("events: decode %q: %w", abbrev(data.String()), err)
				}
				got = true
				if err := fn(ev); err != nil {
					return got, callbackError{err}
				}
			}
			event = ""
			data.Reset()
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			event = value
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		}
	}
	if err := sc.Err(); err != nil {
		return got, fmt.Errorf("events: %w", err)
	}
	return got, io.ErrUnexpectedEOF
}

func abbrev(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// reconnects reports whether Follow connects again after the error answer
// e: the server is busy or restarting (503, 429), or a proxy in front of it
// could not reach it (502, 504).
func reconnects(e *Error) bool {
	switch e.Status {
	case http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	}
	return false
}
