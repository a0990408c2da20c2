package server

import (
	"net/http"
	"sync"
	"time"
)

const (
	// streamWriteTimeout bounds each write of a stream: a client that
	// stops reading is cut rather than holding the stream (and a graceful
	// shutdown) for ever; streamEndGrace is what the last words of an
	// ended stream get.
	streamWriteTimeout = 30 * time.Second
	streamEndGrace     = time.Second
)

// streamWrites wraps w, the writer of a stream (the event stream, a gRPC
// stream), which outlives the server's write timeout: each write gets
// streamWriteTimeout instead, and once end is closed streamEndGrace. Call
// release before the handler returns.
func streamWrites(w http.ResponseWriter, end <-chan struct{}) (_ http.ResponseWriter, release func()) {
	d := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w)}
	d.setDeadline()
	done, cut := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(cut)
		select {
		case <-end:
			d.mu.Lock()
			d.until = time.Now().Add(streamEndGrace)
			d.mu.Unlock()
			d.setDeadline()
		case <-done:
		}
	}()
	return d, func() {
		close(done)
		<-cut // w is not to be used once the handler returned
	}
}

// deadlineWriter sets the write deadline of each write (and flush) of a
// stream: streamWriteTimeout from now, or until once set.
type deadlineWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	mu    sync.Mutex
	until time.Time
}

func (d *deadlineWriter) setDeadline() {
	d.mu.Lock()
	defer d.mu.Unlock()
	at := time.Now().Add(streamWriteTimeout)
	if !d.until.IsZero() && d.until.Before(at) {
		at = d.until
	}
	_ = d.rc.SetWriteDeadline(at) // ErrNotSupported: the server's own deadline stands
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.setDeadline()
	return d.ResponseWriter.Write(p)
}

func (d *deadlineWriter) FlushError() error {
	d.setDeadline()
	return d.rc.Flush()
}

func (d *deadlineWriter) Flush() { _ = d.FlushError() }

func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
