package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// A remote worker in Go runs the steps of handler "shop.charge", which the
// server's engine leaves to remote workers, over gRPC: the server pushes
// each step on the worker's stream as soon as it is ready.
func ExampleGRPCWorker() {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The server: an engine with its API, without authentication (a test;
	// a real worker sends a key with workers:connect as Token).
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)
	db, err := weftdb.Open(ctx, filepath.Join(dir, "weft.db"), weftdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	e, err := weft.New(db, weft.Config{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Register(ctx, workflow.New("shop", "order", "1").Step("charge", "shop.charge")); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer e.Stop(ctx)
	srv, _ := server.New(e, server.Options{DisableAuth: true, Logger: quiet})
	defer srv.Close()
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.Protocols = new(http.Protocols)
	hs.Config.Protocols.SetHTTP1(true)
	hs.Config.Protocols.SetUnencryptedHTTP2(true)
	hs.Start()
	defer hs.Close()

	// The worker.
	w, err := client.NewGRPCWorker(client.WorkerConfig{URL: hs.URL, Name: "billing", Slots: 2, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	w.Handle("shop.charge", func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
		var in struct{ Cents int }
		if err := json.Unmarshal(step.Input, &in); err != nil {
			return nil, client.Permanent(err)
		}
		return json.Marshal(map[string]string{"receipt": fmt.Sprintf("charged %d cents", in.Cents)})
	})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()

	sub, err := e.Submit(ctx, weft.Submission{Workflow: "shop/order", Input: map[string]int{"cents": 250}})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, sub.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, string(task.Steps[0].Result))
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output: completed {"receipt":"charged 250 cents"}
}
