package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/metrics"
	"github.com/weftrun/weft/server"
)

// serveMetrics serves an engine's metrics on addr (/metrics) with its
// liveness and readiness (/health/live, /health/ready), until stop is
// called.
func (a *app) serveMetrics(e *weft.Engine, addr string) (stop func(), err error) {
	m := metrics.New(e, a.log)
	stopListening, err := a.listenMetrics(e, addr, m.Handler())
	if err != nil {
		m.Close()
		return nil, err
	}
	return func() { stopListening(); m.Close() }, nil
}

// listenMetrics serves h on addr (/metrics) with the engine's liveness
// and readiness, until stop is called.
func (a *app) listenMetrics(e *weft.Engine, addr string, h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, a.listenError("metrics-addr", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	mux.Handle("GET /health/", server.Health(e, a.log))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	// The address line lets scripts (and tests) find a port chosen by :0.
	a.notice(slog.LevelInfo, fmt.Sprintf("metrics on http://%s/metrics", ln.Addr()), "url", fmt.Sprintf("http://%s/metrics", ln.Addr()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}, nil
}
