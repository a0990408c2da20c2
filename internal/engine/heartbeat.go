package engine

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/weftrun/weft/internal/health"
	"github.com/weftrun/weft/store"
)

// heartbeatLoop renews the engine's lease and stops handlers whose steps
// were cancelled or taken over elsewhere. It runs until Stop has drained
// the engine, not only while it claims.
func (x *executor) heartbeat(ctx context.Context) {
	defer x.e.beating.Done()
	every := x.e.cfg.HeartbeatInterval
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := every
		x.mu.Lock()
		inflight := make([]store.Fence, 0, len(x.inflight))
		for _, r := range x.inflight {
			inflight = append(inflight, r.fence)
		}
		x.mu.Unlock()
		id := x.e.ID()
		res, err := x.e.store.Heartbeat(ctx, store.HeartbeatParams{EngineID: id, Now: time.Now(), Held: inflight})
		switch {
		case errors.Is(err, store.ErrEngineLost):
			x.e.declaredDead(ctx, id)
		case err != nil:
			if wait := x.e.monitor.FailedWithin(ctx, health.LoopHeartbeat, "heartbeat", err, heartbeatRetry(every)); wait > 0 {
				next = wait
			}
		default:
			x.e.monitor.Succeeded(health.LoopHeartbeat)
			x.advertise(ctx, id)
			if len(res.Lost) > 0 {
				x.cancelFences(res.Lost, errLeaseLost)
			}
		}
		t.Reset(next)
	}
}

// declaredDead handles the store's word that the engine lost was declared
// dead (it stalled past its lease): its in-flight work belongs to others now,
// so it drops it and registers under a new identity. The claim loop and the
// heartbeat may both notice: only the first acts.
func (e *Engine) declaredDead(ctx context.Context, lost string) {
	// One rejoin at a time: the loops that hear the news together must not
	// each register a new identity.
	e.rejoin.Lock()
	defer e.rejoin.Unlock()
	if e.ID() != lost {
		return
	}
	e.exec.cancelAll(errLeaseLost)
	e.log.Warn("engine was declared dead; dropping in-flight work and registering again", "engine_id", lost)
	var b [4]byte
	_, _ = crand.Read(b[:])
	id := fmt.Sprintf("%s-%d-%s", e.host, os.Getpid(), hex.EncodeToString(b[:]))
	// The new identity is used only once it is registered: a heartbeat or
	// claim under an identity the store does not know yet would be taken
	// for another death. If registering fails, the loops keep hearing that
	// the old one is dead and come back here.
	if err := e.store.RegisterEngine(ctx, e.exec.engineInfo(id)); err != nil {
		e.log.Error("register engine again", "engine_id", id, "error", err)
		return
	}
	e.mu.Lock()
	e.engineID = id
	e.mu.Unlock()
}

// heartbeatRetry is the longest wait after a failed heartbeat: half a
// heartbeat interval. The other loops back off up to 30 s from a database
// that fails, but the heartbeat must renew the lease as soon as the
// database answers again: put off longer (or only tried at the next tick
// after a backoff), it let the engine's leases lapse over an outage
// shorter than the lease (a PostgreSQL restart), and another engine ran
// its steps while it still did. An outage shorter than the lease less
// half an interval costs no lease.
func heartbeatRetry(every time.Duration) time.Duration {
	return max(every/2, time.Millisecond)
}
