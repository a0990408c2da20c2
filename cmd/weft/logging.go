package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/spf13/cobra"
)

// This file holds how the CLI logs: the logger of --log-level and
// --log-format, the notices an operator sees whatever the level, and the
// writer that holds logs back while a live view is drawn.

// setupLogging builds the logger from --log-level and --log-format: slog
// text or JSON on stderr.
func (a *app) setupLogging(cmd *cobra.Command) error {
	name := a.logLevel
	if name == "" {
		name = "warn"
		if cmd.Name() == "worker" || cmd.Name() == "serve" {
			name = "info"
		}
	}
	var level slog.Level
	switch strings.ToLower(name) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return usageErrorf("%s: unknown level %q (want debug, info, warn or error)", a.config.Describe("log-level"), a.config.Show("log-level", name))
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(a.logFormat) {
	case "text", "":
		a.log = slog.New(slog.NewTextHandler(a.logOut, opts))
	case "json":
		a.log = slog.New(slog.NewJSONHandler(a.logOut, opts))
		a.notices = slog.New(slog.NewJSONHandler(a.logOut, &slog.HandlerOptions{Level: slog.LevelDebug}))
	default:
		return usageErrorf("%s: unknown format %q (want text or json)", a.config.Describe("log-format"), a.config.Show("log-format", a.logFormat))
	}
	return nil
}

// notice writes a line the operator sees whatever the log level (the
// address a server listens on, what an interrupt does, the error that ends
// a command): "weft: MSG" as text, or with --log-format json a JSON record
// with args, so that every line on stderr is JSON.
func (a *app) notice(level slog.Level, msg string, args ...any) {
	if a.notices == nil {
		fmt.Fprintf(a.stderr, "weft: %s\n", msg)
		return
	}
	a.notices.Log(context.Background(), level, msg, args...)
}

// progressErr is where 'weft run --json' writes its progress: stderr, one
// JSON record a line with --log-format json.
func (a *app) progressErr() io.Writer {
	if a.notices == nil {
		return a.stderr
	}
	return &noticeLines{log: a.notices}
}

// noticeLines writes each line written to it as an INFO record of log.
type noticeLines struct {
	log *slog.Logger
	buf []byte
}

func (w *noticeLines) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		if line := strings.TrimSpace(string(w.buf[:i])); line != "" {
			w.log.Info(line, "progress", true)
		}
		w.buf = w.buf[i+1:]
	}
}

// holdWriter passes writes through, except while held: then it buffers
// them until released, so that logs do not tear a live view drawn on the
// same terminal.
type holdWriter struct {
	mu   sync.Mutex
	w    io.Writer
	held bool
	buf  bytes.Buffer
}

func (h *holdWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		return h.buf.Write(p)
	}
	return h.w.Write(p)
}

// hold starts buffering.
func (h *holdWriter) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = true
}

// release writes what was buffered and stops buffering.
func (h *holdWriter) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = false
	if h.buf.Len() > 0 {
		_, _ = h.w.Write(h.buf.Bytes())
		h.buf.Reset()
	}
}
