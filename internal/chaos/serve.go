package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/weftrun/weft/internal/weftproc"
	"github.com/weftrun/weft/wire"
)

// FaultKillServe SIGKILLs `weft serve` while a remote worker is attached
// to it, and starts it again on the same address.
const FaultKillServe = "kill-serve"

// remoteTemplate is the share of the workload run by a remote worker
// through `weft serve`: r is claimed over the wire protocol, z is an exec
// step after it.
const remoteTemplate = `namespace: chaos
name: remote
version: "1"
steps:
  - name: r
    handler: remote.work
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
  - name: z
    handler: exec
    depends_on: [r]
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
`

// startServer starts `weft serve` (r.srv, on r.srvAddr) and waits until
// it answers.
func (r *runner) startServer(ctx context.Context) error {
	if err := r.srv.Start(r.bin); err != nil {
		return err
	}
	return weftproc.WaitHealthy(ctx, "http://"+r.srvAddr, r.srv)
}

// remoteWork is the remote worker's work: it appends "TASK STEP ATTEMPT
// remote" to the ledger and works 0.1 s.
func remoteWork(ledger string) func(context.Context, wire.ClaimedStep) json.RawMessage {
	return func(ctx context.Context, s wire.ClaimedStep) json.RawMessage {
		_ = appendLine(ledger, fmt.Sprintf("%d %s %d remote", s.TaskID, s.Step, s.Attempt))
		select { // the work
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
		return json.RawMessage(fmt.Sprintf(`{"step": %q, "task": %d, "by": "remote"}`, s.Step, s.TaskID))
	}
}

// appendLine appends a line to the ledger.
func appendLine(ledger, line string) error {
	f, err := os.OpenFile(ledger, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
