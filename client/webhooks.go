package client

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft/wire"
)

// Webhook is a webhook subscription.
type Webhook = wire.Webhook

// CreateWebhook creates a webhook; the result carries its secret, shown
// this once.
func (c *Client) CreateWebhook(ctx context.Context, req wire.CreateWebhook) (Webhook, error) {
	var w Webhook
	_, err := c.do(ctx, "POST", "/v1/webhooks", req, &w)
	return w, err
}

// Webhooks lists the webhooks.
func (c *Client) Webhooks(ctx context.Context) ([]Webhook, error) {
	var out wire.WebhookList
	if _, err := c.do(ctx, "GET", "/v1/webhooks", nil, &out); err != nil {
		return nil, err
	}
	return out.Webhooks, nil
}

// DeleteWebhook removes a webhook.
func (c *Client) DeleteWebhook(ctx context.Context, id int64) error {
	_, err := c.do(ctx, "DELETE", "/v1/webhooks/"+strconv.FormatInt(id, 10), nil, nil)
	return err
}

// EnableWebhook makes a disabled webhook deliver again.
func (c *Client) EnableWebhook(ctx context.Context, id int64) (Webhook, error) {
	var w Webhook
	_, err := c.do(ctx, "POST", "/v1/webhooks/"+strconv.FormatInt(id, 10)+"/enable", nil, &w)
	return w, err
}

// SignatureHeader is the header that signs a webhook delivery.
const SignatureHeader = wire.SignatureHeader

// VerifyWebhook checks a webhook delivery's signature against secret and
// returns its body (the event's JSON). A signature older (or newer) than
// tolerance is refused, so that a captured delivery cannot be replayed
// later; 0 means five minutes. The body is read up to 16 MiB.
func VerifyWebhook(r *http.Request, secret string, tolerance time.Duration) ([]byte, error) {
	if tolerance <= 0 {
		tolerance = 5 * time.Minute
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("webhook: read body: %w", err)
	}
	var ts, sig string
	for _, part := range strings.Split(r.Header.Get(SignatureHeader), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return nil, errors.New("webhook: missing or malformed " + SignatureHeader + " header")
	}
	if d := time.Since(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return nil, fmt.Errorf("webhook: signed %s ago, outside the tolerance of %s", d.Round(time.Second), tolerance)
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return nil, errors.New("webhook: malformed signature")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return nil, errors.New("webhook: signature does not match")
	}
	return body, nil
}
