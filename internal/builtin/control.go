package builtin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/weftrun/weft/internal/outcome"
)

// maxControlLine bounds one line of the control channel, and maxQuotedLine
// how much of a bad line an error quotes.
const (
	maxControlLine = 1 << 20
	maxQuotedLine  = 200
)

// controlChannel is the pipe on which an exec command reports checkpoints
// and progress: file descriptor 3 (WEFT_CONTROL_FD), one JSON object per
// line, either {"checkpoint": <any JSON>} or {"progress": 0.5, "message":
// "..."}. Each checkpoint is saved (fenced) before the next line is read,
// so a command that wrote one and was then killed resumes from it.
type controlChannel struct {
	r, w *os.File
	done chan struct{}
	err  error // the first problem, set before done closes
}

// openControl opens the control channel of a command that reports to rep,
// with red's secrets replaced in what it reports and in the errors that
// quote a line.
func openControl(ctx context.Context, rep Reporter, red *redactor) (*controlChannel, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("control channel: %w", err)
	}
	c := &controlChannel{r: r, w: w, done: make(chan struct{})}
	go c.read(ctx, rep, red)
	return c, nil
}

func (c *controlChannel) read(ctx context.Context, rep Reporter, red *redactor) {
	// quoted is the start of the line for an error, secrets replaced
	// before it is cut.
	quoted := func(line []byte) string { return excerpt([]byte(red.text(string(line))), maxQuotedLine, false) }
	defer close(c.done)
	sc := bufio.NewScanner(c.r)
	sc.Buffer(make([]byte, 64<<10), maxControlLine)
	for sc.Scan() {
		if c.err != nil || len(sc.Bytes()) == 0 {
			continue // drain, so the command never blocks on a full pipe
		}
		var msg struct {
			Checkpoint json.RawMessage `json:"checkpoint"`
			Progress   *float64        `json:"progress"`
			Message    string          `json:"message"`
		}
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		switch err := dec.Decode(&msg); {
		case err != nil:
			c.err = &outcome.PermanentError{Err: fmt.Errorf("control channel: invalid line %q: %w", quoted(sc.Bytes()), err)}
		case msg.Checkpoint != nil:
			if err := rep.SaveCheckpoint(ctx, red.json(msg.Checkpoint)); err != nil {
				c.err = err
			}
		case msg.Progress != nil:
			if err := rep.Progress(ctx, *msg.Progress, red.text(msg.Message)); err != nil {
				c.err = err
			}
		default:
			c.err = &outcome.PermanentError{Err: fmt.Errorf(`control channel: line %q has neither "checkpoint" nor "progress"`, quoted(sc.Bytes()))}
		}
	}
	if err := sc.Err(); err != nil && c.err == nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, os.ErrClosed) {
		c.err = fmt.Errorf("control channel: %w", err)
	}
}

// started closes the parent's copy of the write end once the command has
// its own.
func (c *controlChannel) started() { c.w.Close() }

// finish waits until the command's lines are read, at most wait after it
// exited (a background descendant may hold the pipe open), and returns the
// first problem.
func (c *controlChannel) finish(wait time.Duration) error {
	_ = c.r.SetReadDeadline(time.Now().Add(wait))
	<-c.done
	return c.err
}

func (c *controlChannel) close() {
	c.w.Close()
	c.r.Close()
	<-c.done
}
