package sqltx

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// This file holds how a Store wakes engines: its own through the Wake
// channel, those of other processes through the dialect's notification,
// sent at most once per window.

// Wake receives a value whenever this handle made steps ready.
func (s *Handle) Wake() <-chan struct{} { return s.wake }

// Nudge wakes the engine on this handle as if the handle had made steps
// ready itself; backends call it when another process did.
func (s *Handle) Nudge() { s.Notify() }

// The payload of a notification is words separated by spaces: NotifyDue when
// its transaction wrote a time something falls due, and "from=" with the
// origin of the handle that sent it for a transaction of its own, whose
// engine it woke itself.
const NotifyDue = "due"

// NotifyPayload is the payload of a notification this handle sends: due
// says its transaction wrote a due time, own that the transaction was this
// handle's (not a caller's, which commits after this handle woke its engine).
func (s *Handle) NotifyPayload(due, own bool) string {
	var words []string
	if due {
		words = append(words, NotifyDue)
	}
	if own {
		words = append(words, "from="+s.origin)
	}
	return strings.Join(words, " ")
}

// Heard reads the payload of a notification: whether it says a due time was
// written, and whether this handle sent it (its engine knows already).
func (s *Handle) Heard(payload string) (due, own bool) {
	for _, w := range strings.Fields(payload) {
		switch {
		case w == NotifyDue:
			due = true
		case w == "from="+s.origin:
			own = true
		}
	}
	return due, own
}

// DueWake receives a value whenever this handle, or another process that
// told it (NudgeDue), wrote a time something falls due: a delayed step, a
// ttl, a good_until, a schedule's next tick.
func (s *Handle) DueWake() <-chan struct{} { return s.due }

// TaskEnded returns a channel closed once a transaction of this handle
// that ends a task (its audit trail records the task's end) has committed.
func (s *Handle) TaskEnded() <-chan struct{} { return s.Ended.C() }

// NudgeDue wakes DueWake; backends call it when another process wrote a
// due time.
func (s *Handle) NudgeDue() {
	select {
	case s.due <- struct{}{}:
	default:
	}
}

func (s *Handle) Notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// TakeNotify reports whether a transaction committing now may notify other
// processes itself, and if so starts a new window.
func (s *Handle) TakeNotify() bool {
	if s.Notice.Every <= 0 {
		return true
	}
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	if now := time.Now(); now.Sub(s.lastNotify) >= s.Notice.Every {
		s.lastNotify = now
		return true
	}
	return false
}

// ScheduleNotify sends one notification when the current window ends, for
// the committed transactions that made steps ready within it.
func (s *Handle) ScheduleNotify() {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	if s.notifyLater != nil || s.notifyClosed {
		return
	}
	s.notifyLater = time.AfterFunc(time.Until(s.lastNotify.Add(s.Notice.Every)), func() {
		s.notifyMu.Lock()
		s.notifyLater = nil
		// A transaction that took a new window since covers the ones that
		// waited: they committed before it did.
		covered := time.Since(s.lastNotify) < s.Notice.Every
		if !covered {
			s.lastNotify = time.Now()
		}
		closed := s.notifyClosed
		s.notifyMu.Unlock()
		if closed || covered {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.sendNotify(ctx) // failing, other processes still poll
	})
}

// sendNotify sends the notification in a statement of its own
// (autocommit): one round trip.
func (s *Handle) sendNotify(ctx context.Context) error {
	if _, err := s.DB.Exec(ctx, s.Bind(s.Notice.Statement), s.Notice.Channel, s.NotifyPayload(false, true)); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}

// Announce tells the engines of other processes to look for work, as a
// transaction that made steps ready does (within the same windows): an
// engine calls it when an outcome it recorded freed room under a
// concurrency limit that held steps back, which nothing else announces.
func (s *Handle) Announce(ctx context.Context) error {
	if s.Notice.Statement == "" {
		return nil
	}
	if !s.TakeNotify() {
		s.ScheduleNotify()
		return nil
	}
	return s.sendNotify(ctx)
}
