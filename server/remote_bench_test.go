package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// BenchmarkRemoteWorker compares a remote worker over the REST long poll
// (claim, then complete, per step) with one held on the gRPC push stream
// (pushed, then complete), on SQLite with the server on loopback:
// latency runs one task at a time, from submission to the recorded
// outcome, with one slot; throughput burns down b.N queued tasks with four
// slots. Figures are in docs/BENCHMARKS.md.
func BenchmarkRemoteWorker(b *testing.B) {
	for _, transport := range []string{"rest", "grpc"} {
		for _, mode := range []string{"latency", "throughput"} {
			b.Run(transport+"/"+mode, func(b *testing.B) {
				slots := 1
				if mode == "throughput" {
					slots = 4
				}
				rb := newRemoteBench(b)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if transport == "rest" {
					rb.restWorker(ctx, b, slots)
				} else {
					rb.grpcWorker(ctx, b, slots)
				}
				if mode == "latency" {
					rb.latency(ctx, b)
				} else {
					rb.throughput(ctx, b)
				}
			})
		}
	}
}

type remoteBench struct {
	e     *weft.Engine
	url   string
	token string
}

func newRemoteBench(b *testing.B) *remoteBench {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "weft.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	e, err := weft.New(st, weft.Config{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Register(context.Background(), workflow.New("bench", "remote", "1").Step("s", "remote.noop")); err != nil {
		b.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Stop(context.Background()) })
	srv, err := server.New(e, server.Options{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	token, k, err := server.NewAPIKey("bench", []string{server.PermWorkersConnect})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.CreateAPIKey(context.Background(), k); err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.Protocols = new(http.Protocols)
	hs.Config.Protocols.SetHTTP1(true)
	hs.Config.Protocols.SetUnencryptedHTTP2(true)
	hs.Start()
	b.Cleanup(hs.Close)
	return &remoteBench{e: e, url: hs.URL, token: token}
}

// restWorker runs slots goroutines that each long-poll a claim of one step
// and complete it, as the REST protocol's workers do.
func (rb *remoteBench) restWorker(ctx context.Context, b *testing.B, slots int) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: slots + 1}}
	b.Cleanup(hc.CloseIdleConnections)
	call := func(path string, body, out any) error {
		data, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, "POST", rb.url+path, bytes.NewReader(data))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+rb.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			return fmt.Errorf("%s: %d %s", path, resp.StatusCode, raw)
		}
		if out != nil {
			return json.Unmarshal(raw, out)
		}
		return nil
	}
	var reg wire.WorkerRegistered
	if err := call("/v1/workers", wire.RegisterWorker{Name: "rest", Handlers: []string{"remote.noop"}}, &reg); err != nil {
		b.Fatal(err)
	}
	for range slots {
		go func() {
			for ctx.Err() == nil {
				var cr wire.ClaimResponse
				if err := call("/v1/workers/"+reg.WorkerID+"/claim", wire.ClaimRequest{Handlers: []string{"remote.noop"}, Max: 1, WaitMS: 5000}, &cr); err != nil {
					continue
				}
				for _, s := range cr.Steps {
					_ = call("/v1/workers/"+reg.WorkerID+"/complete", wire.Complete{Fence: &s.Fence, Result: json.RawMessage(`null`)}, nil)
				}
			}
		}()
	}
}

// grpcWorker runs the Go client's gRPC worker with slots slots.
func (rb *remoteBench) grpcWorker(ctx context.Context, b *testing.B, slots int) {
	w, err := client.NewGRPCWorker(client.WorkerConfig{URL: rb.url, Token: rb.token, Slots: slots, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	w.Handle("remote.noop", func(context.Context, wire.ClaimedStep) (json.RawMessage, error) { return nil, nil })
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	b.Cleanup(func() { <-done })
}

// latency runs b.N tasks one after the other: ns/op is a step's latency
// from submission to its recorded outcome.
func (rb *remoteBench) latency(ctx context.Context, b *testing.B) {
	// One task first, so that the worker is connected when timing starts.
	rb.one(ctx, b)
	b.ResetTimer()
	for range b.N {
		rb.one(ctx, b)
	}
}

func (rb *remoteBench) one(ctx context.Context, b *testing.B) {
	sub, err := rb.e.Submit(ctx, weft.Submission{Workflow: "bench/remote"})
	if err != nil {
		b.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := rb.e.Wait(wctx, sub.Task.ID); err != nil {
		b.Fatal(err)
	}
}

// throughput submits b.N tasks at once and waits for them all: tasks/s.
func (rb *remoteBench) throughput(ctx context.Context, b *testing.B) {
	rb.one(ctx, b)
	b.ResetTimer()
	start := time.Now()
	var ids []int64
	for left := b.N; left > 0; left -= 1000 {
		subs := make([]weft.Submission, min(left, 1000))
		for i := range subs {
			subs[i].Workflow = "bench/remote"
		}
		res, err := rb.e.SubmitMany(ctx, subs)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			ids = append(ids, r.Task.ID)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for _, id := range ids {
		if _, err := rb.e.Wait(wctx, id); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tasks/s")
}
