// Command proxy holds a running weft serve to the API's OpenAPI document:
// it forwards every request to the server and appends each answer outside
// the document to a report file, one line each. The Python and TypeScript
// clients' tests run their server behind it and fail on a report that is
// not empty.
//
//	go run ./internal/apicontract/proxy --listen 127.0.0.1:8081 --upstream http://127.0.0.1:8080 --report /tmp/breaches
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/weftrun/weft/internal/apicontract"
)

func main() {
	listen := flag.String("listen", "", "address to serve on, HOST:PORT")
	upstream := flag.String("upstream", "", "the weft server, http://HOST:PORT")
	report := flag.String("report", "", "file the breaches are appended to")
	flag.Parse()
	if err := run(*listen, *upstream, *report); err != nil {
		fmt.Fprintln(os.Stderr, "apicontract proxy:", err)
		os.Exit(1)
	}
}

func run(listen, upstream, report string) error {
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" {
		return fmt.Errorf("--upstream %q: want http://HOST:PORT", upstream)
	}
	if report == "" || listen == "" {
		return errors.New("--listen and --report are required")
	}
	out, err := os.OpenFile(report, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	var mu sync.Mutex
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1 // event streams pass at once
	// The server down (a test restarting it) is no answer of the server's:
	// the proxy's 502 is not checked.
	proxy.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if c, ok := w.(interface{ Skip() }); ok {
			c.Skip()
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	h, err := apicontract.New(proxy, func(breach string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(out, breach)
	})
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: listen, Handler: h}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Printf("checking %s against the API's document on %s", upstream, listen)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
