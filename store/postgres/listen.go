package postgres

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// listen holds one connection per store LISTENing on the schema's channel
// and wakes the store's engine on every notification, so work that another
// process made ready is claimed at once instead of at the next poll. When
// the connection drops it reconnects with backoff; meanwhile the engine's
// polling still finds the work.
func (s Store) listen(ctx context.Context, cfg *pgx.ConnConfig, channel string, log *slog.Logger) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		listened, err := s.listenOnce(ctx, cfg, channel)
		if ctx.Err() != nil {
			return
		}
		if listened {
			backoff = 100 * time.Millisecond // it worked until now: retry soon
		}
		log.Warn("postgres listener lost its connection; reconnecting", "error", err, "retry_in", backoff)
		// Work may have become ready while nobody listened.
		s.Nudge()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff + time.Duration(rand.Int64N(int64(backoff)/2+1))):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listenOnce listens on one connection until it fails; listened reports
// whether LISTEN had succeeded. It wakes the engine once LISTEN is in
// force: work may have become ready since it last looked.
func (s Store) listenOnce(ctx context.Context, cfg *pgx.ConnConfig, channel string) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return false, err
	}
	s.heard.Store(true)
	defer s.heard.Store(false)
	// Work may have become ready before the listening began (at start, or
	// while reconnecting): look once now that nothing more is missed.
	s.Nudge()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		due, own := s.Heard(n.Payload)
		if own {
			continue // this handle's transaction: its engine was woken
		}
		if due {
			s.NudgeDue()
		}
		s.Nudge()
	}
}
