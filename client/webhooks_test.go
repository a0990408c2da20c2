package client_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
)

func sign(secret, body string, at time.Time) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + body))
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	const secret, body = "whsec_test", `{"type":"task.failed"}`
	now := time.Now()
	tests := []struct {
		name, header, body string
		ok                 bool
	}{
		{"valid", sign(secret, body, now), body, true},
		{"valid with spaces", strings.ReplaceAll(sign(secret, body, now), ",", ", "), body, true},
		{"tampered body", sign(secret, body, now), `{"type":"task.completed"}`, false},
		{"other secret", sign("whsec_other", body, now), body, false},
		{"too old", sign(secret, body, now.Add(-10*time.Minute)), body, false},
		{"from the future", sign(secret, body, now.Add(10*time.Minute)), body, false},
		{"missing", "", body, false},
		{"malformed", "t=x,v1=zz", body, false},
		{"no signature", "t=" + strconv.FormatInt(now.Unix(), 10), body, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", "/hook", strings.NewReader(tc.body))
			if tc.header != "" {
				r.Header.Set(client.SignatureHeader, tc.header)
			}
			got, err := client.VerifyWebhook(r, secret, 0)
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.body, string(got))
		})
	}
}
