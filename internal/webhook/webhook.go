// Package webhook delivers the history's events to the webhooks' URLs
// while this engine leads maintenance, and holds the operations on
// webhooks.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftrun/weft/internal/jitter"
	"github.com/weftrun/weft/internal/outbound"
	"github.com/weftrun/weft/internal/redact"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// The leader follows each active webhook's cursor
// through the history and POSTs the matching events to its URL one at a
// time, in order, each signed with the webhook's secret. An event is
// delivered at least once: the cursor moves after the receiver answered
// 2xx (a leader that dies between the two sends that event again). A
// delivery that fails for a passing reason (no answer, 408, 429, 5xx) is
// tried again with backoff; one the receiver refuses for good (any other
// status) disables the webhook until an operator enables it again.
const (
	// webhookTimeout bounds one delivery.
	webhookTimeout = 10 * time.Second
	// webhookBackoffMax caps the delay between attempts.
	webhookBackoffMax = 10 * time.Minute
	// webhookBatch is how many events one round reads per webhook.
	webhookBatch = 100
	// webhookRefresh is how often the leader reads the webhooks again
	// (changes made through this engine wake it at once).
	webhookRefresh = 5 * time.Second
)

// EventTypes are the event types a webhook may select.
var EventTypes = []string{
	"task.submitted", "task.started", "task.retried", "task.completed", "task.failed", "task.cancelled", "task.expired",
	"step.pending", "step.ready", "step.claimed", "step.completed", "step.failed", "step.waiting", "step.skipped",
	"step.cancelled", "step.expired", "step.resolved", "step.preempted",
	"breaker.opened", "breaker.probing", "breaker.closed",
}

// Store is what the deliverer reads and records.
type Store interface {
	store.History
	store.Webhooks
}

// Deliverer delivers webhooks while this engine leads: the maintenance
// loop tells it whether it does (Lead).
type Deliverer struct {
	store Store
	log   *slog.Logger
	// poll is the engine's poll interval: how often the loop looks, and
	// the first backoff of a failing webhook.
	poll time.Duration
	// requireFilter checks that a webhook's scope names what exists.
	requireFilter func(ctx context.Context, f store.TaskFilter) error
	leading       atomic.Bool
	wake          chan struct{}
	client        *http.Client
}

// New returns a deliverer on s; requireFilter checks that the scope of a
// webhook to create names what exists.
func New(s Store, log *slog.Logger, poll time.Duration, requireFilter func(context.Context, store.TaskFilter) error) *Deliverer {
	return &Deliverer{store: s, log: log, poll: poll, requireFilter: requireFilter, wake: make(chan struct{}, 1), client: &http.Client{Timeout: webhookTimeout,
		Transport: outbound.Transport(),
		// Deliveries do not follow redirects: a 3xx is the receiver's
		// answer, and refuses the event for good.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Lead records whether this engine holds the maintenance lease.
func (d *Deliverer) Lead(leader bool) {
	if leader && !d.leading.Swap(true) {
		d.poke()
	} else if !leader {
		d.leading.Store(false)
	}
}

func (d *Deliverer) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Spec is what an operator asks for when creating a webhook.
type Spec struct {
	URL       string
	Namespace string
	Workflow  string
	Types     []string
	// Actor names who created it.
	Actor string
}

// Create validates spec and stores a webhook that delivers the
// events from now on. The returned webhook carries its secret, which is
// shown this once.
func (d *Deliverer) Create(ctx context.Context, spec Spec) (store.Webhook, error) {
	if err := validateWebhook(spec); err != nil {
		return store.Webhook{}, err
	}
	// The scope is a task filter's: it names what exists.
	ns, name, _ := workflow.ParseFilter(spec.Namespace, spec.Workflow) // checked by validateWebhook
	if err := d.requireFilter(ctx, store.TaskFilter{Namespace: ns, Workflow: name}); err != nil {
		return store.Webhook{}, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return store.Webhook{}, fmt.Errorf("webhook secret: %w", err)
	}
	end, err := d.store.HistoryEnd(ctx)
	if err != nil {
		return store.Webhook{}, fmt.Errorf("create webhook: %w", err)
	}
	w, err := d.store.CreateWebhook(ctx, store.Webhook{URL: spec.URL, Secret: "whsec_" + hex.EncodeToString(secret),
		Namespace: spec.Namespace, Workflow: spec.Workflow, Types: spec.Types, Cursor: end, CreatedBy: spec.Actor})
	if err != nil {
		return store.Webhook{}, err
	}
	d.log.Info("webhook created", "webhook_id", w.ID, "url", redactURL(w.URL), "actor", spec.Actor)
	d.poke()
	return w, nil
}

func validateWebhook(spec Spec) error {
	// The answer quotes the URL with its password hidden: an error may
	// be logged, or shown to others than who sent it.
	u, err := url.Parse(spec.URL)
	if err != nil {
		return fmt.Errorf("webhook: %w", store.Invalidf("url", "is not a URL: want an absolute http:// or https:// URL"))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("webhook: %w", store.Invalidf("url", "%q: want an absolute http:// or https:// URL", redact.URL(spec.URL)))
	}
	if len(spec.URL) > 2048 {
		return fmt.Errorf("webhook: %w", store.Invalidf("url", "longer than 2048 bytes"))
	}
	if _, _, err := workflow.ParseFilter(spec.Namespace, spec.Workflow); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	for _, t := range spec.Types {
		if !slices.Contains(EventTypes, t) {
			return fmt.Errorf("webhook: %w", store.Invalidf("types", "%q is not an event type: want one of %s", t, strings.Join(EventTypes, ", ")))
		}
	}
	return nil
}

// List lists the webhooks without their secrets, and with the passwords
// of their URLs hidden (redact.URL): only deliveries use them.
func (d *Deliverer) List(ctx context.Context) ([]store.Webhook, error) {
	ws, err := d.store.Webhooks(ctx)
	if err != nil {
		return nil, err
	}
	for i := range ws {
		ws[i].Secret = ""
		ws[i].URL = redact.URL(ws[i].URL)
	}
	return ws, nil
}

// Delete removes a webhook.
func (d *Deliverer) Delete(ctx context.Context, id int64, actor string) error {
	if err := d.store.DeleteWebhook(ctx, id); err != nil {
		return fmt.Errorf("delete webhook %d: %w", id, err)
	}
	d.log.Info("webhook deleted", "webhook_id", id, "actor", actor)
	return nil
}

// Enable makes a disabled webhook deliver again from where it stopped.
func (d *Deliverer) Enable(ctx context.Context, id int64, actor string) error {
	if err := d.store.EnableWebhook(ctx, id); err != nil {
		return fmt.Errorf("enable webhook %d: %w", id, err)
	}
	d.log.Info("webhook enabled", "webhook_id", id, "actor", actor)
	d.poke()
	return nil
}

// Run delivers webhooks while this engine leads, until ctx ends.
func (d *Deliverer) Run(ctx context.Context) {
	var (
		hooks  []store.Webhook
		readAt time.Time
		// busy holds the webhooks with a delivery in flight, until the
		// loop has taken what it left (ended): a round that began from
		// the list as it was before would send its events again.
		busy      = map[int64]bool{}
		mu        sync.Mutex
		ended     = map[int64]delivered{} // under mu: deliveries over, and what each left
		inflight  sync.WaitGroup
		sleep     = jitter.Of(d.poll)
		lastError time.Time
	)
	defer inflight.Wait()
	timer := time.NewTimer(sleep)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
			readAt = time.Time{} // something changed: read the webhooks again
		case <-timer.C:
		}
		sleep = jitter.Of(d.poll)
		mu.Lock()
		over := ended
		ended = map[int64]delivered{}
		mu.Unlock()
		for id, o := range over {
			delete(busy, id)
			if o.reread {
				readAt = time.Time{}
			}
		}
		if d.leading.Load() {
			reread := false
			if time.Since(readAt) >= webhookRefresh {
				ws, err := d.store.Webhooks(ctx)
				if err != nil {
					if time.Since(lastError) > time.Minute {
						d.log.Warn("webhooks: list", "error", err)
						lastError = time.Now()
					}
				} else {
					hooks, readAt, reread = ws, time.Now(), true
				}
			}
			now := time.Now()
			for i := range hooks {
				if w := over[hooks[i].ID].updated; w != nil && !reread {
					// As its delivery left it: newer than the list read
					// before (a list read now has it, and what an
					// operator changed since).
					hooks[i] = *w
				}
				w := hooks[i]
				if busy[w.ID] || w.State != store.WebhookActive || w.NextAttemptAt.After(now) {
					continue
				}
				busy[w.ID] = true
				inflight.Add(1)
				go func() {
					defer inflight.Done()
					o := d.deliver(ctx, w)
					mu.Lock()
					ended[w.ID] = o
					mu.Unlock()
					if o.updated != nil || o.reread {
						d.poke()
					}
				}()
			}
		}
		timer.Reset(sleep)
	}
}

// delivered is what a round of deliveries left: the webhook as it changed
// it (nil: unchanged), or that the stored webhook must be read again.
type delivered struct {
	updated *store.Webhook
	reread  bool
}

// deliver sends one round of a webhook's events and records how far it
// got.
func (d *Deliverer) deliver(ctx context.Context, w store.Webhook) delivered {
	events, err := d.store.History(ctx, store.HistoryQuery{After: w.Cursor, Namespace: w.Namespace, Workflow: w.Workflow, Limit: webhookBatch})
	if err != nil {
		if errors.Is(err, store.ErrInvalid) {
			// A cursor this database did not hand out (a database restored
			// under the webhook): stop rather than loop on it.
			d.webhookFailed(ctx, &w, fmt.Sprintf("its cursor %q is not one of this database: recreate the webhook", w.Cursor), true, 0)
			return delivered{updated: &w}
		}
		d.log.Warn("webhooks: read history", "webhook_id", w.ID, "error", err)
		return delivered{}
	}
	if len(events) == 0 {
		return delivered{}
	}
	from, to, sent := w.Cursor, w.Cursor, 0
	var failure string
	var permanent bool
	var retryAfter time.Duration
	for _, ev := range events {
		if len(w.Types) == 0 || slices.Contains(w.Types, ev.Type) {
			if failure, permanent, retryAfter = d.post(ctx, w, ev); failure != "" {
				break
			}
			sent++
		}
		to = ev.Cursor
	}
	if to != from {
		if err := d.store.WebhookDelivered(ctx, w.ID, from, to, sent); err != nil {
			// Changed meanwhile (reset, deleted) or not recorded: the
			// stored webhook says where to go on from.
			d.log.Warn("webhooks: record delivery", "webhook_id", w.ID, "error", err)
			return delivered{reread: true}
		}
		w.Cursor, w.Failures = to, 0
	}
	if failure != "" {
		w.Failures++
		d.webhookFailed(ctx, &w, failure, permanent, retryAfter)
	}
	return delivered{updated: &w}
}

// post delivers one event. It returns "" on success, else why it failed,
// whether the failure is for good, and how long the receiver asked to
// wait (Retry-After).
func (d *Deliverer) post(ctx context.Context, w store.Webhook, ev store.HistoryEvent) (string, bool, time.Duration) {
	body, err := json.Marshal(wire.EventOf(ev))
	if err != nil {
		return fmt.Sprintf("encode event %s: %v", ev.Cursor, err), true, 0
	}
	req, err := http.NewRequestWithContext(ctx, "POST", w.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Sprintf("request: %v", err), true, 0
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(w.Secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "weft-webhooks")
	req.Header.Set(wire.SignatureHeader, "t="+ts+",v1="+hex.EncodeToString(mac.Sum(nil)))
	req.Header.Set("Weft-Event-Id", ev.Cursor)
	req.Header.Set("Weft-Event-Type", ev.Type)
	req.Header.Set("Weft-Webhook-Id", strconv.FormatInt(w.ID, 10))
	resp, err := d.client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Sprintf("POST %s: %v (event %s)", redactURL(w.URL), err, ev.Cursor), false, 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return "", false, 0
	}
	why := fmt.Sprintf("POST %s: %s (event %s)", redactURL(w.URL), resp.Status, ev.Cursor)
	switch {
	case resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500:
		return why, false, retryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return why, true, 0
}

// retryAfter is how long a Retry-After header asks to wait: seconds, or
// an HTTP date (RFC 9110); 0 when it says nothing usable.
func retryAfter(h string, now time.Time) time.Duration {
	if s, err := strconv.Atoi(h); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if at, err := http.ParseTime(h); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}

// webhookFailed records a failure with the backoff of the webhook's
// failure count, or wait (a Retry-After) if longer. why is stored (the
// webhook's last_error) and logged without the credentials of the
// webhook's URL, which an error may quote (url.Parse's does, whole).
func (d *Deliverer) webhookFailed(ctx context.Context, w *store.Webhook, why string, permanent bool, wait time.Duration) {
	why = redact.Text(why, w.URL)
	backoff := d.poll
	for i := 1; i < w.Failures && backoff < webhookBackoffMax; i++ {
		backoff *= 2
	}
	backoff = min(max(backoff, wait), webhookBackoffMax)
	next := time.Now().Add(jitter.Of(backoff))
	if err := d.store.WebhookFailed(ctx, w.ID, why, next, permanent); err != nil {
		d.log.Warn("webhooks: record failure", "webhook_id", w.ID, "error", err)
		return
	}
	if permanent {
		w.State = store.WebhookDisabled
		d.log.Error("webhook disabled: the receiver refused an event; fix it and enable the webhook again", "webhook_id", w.ID, "reason", why)
		return
	}
	d.log.Warn("webhook delivery failed; retrying", "webhook_id", w.ID, "failures", w.Failures, "retry_in_ms", time.Until(next).Milliseconds(), "reason", why)
}

// redactURL drops a URL's user information and query, which may hold
// credentials, for logs and errors.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
