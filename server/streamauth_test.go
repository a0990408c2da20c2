package server_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
)

// TestStreamEndsWhenCredentialLapses: an open event stream checks its
// credential again, so revoking its key or its token's expiry ends it with
// an unauthenticated error event, however long it has been open.
func TestStreamEndsWhenCredentialLapses(t *testing.T) {
	t.Parallel()
	iss := newIssuer(t)
	cfg := server.JWTConfig{Issuer: "https://id.example", Audience: "weft", PublicKeyPEM: iss.publicPEM(t), Leeway: time.Millisecond}
	en := newEnv(t, backends()["sqlite"](t), server.Options{JWT: &cfg, CredentialRecheck: 50 * time.Millisecond})
	for _, tc := range []struct {
		name  string
		token func() string
		lapse func(token string)
	}{
		{name: "revoked key", token: func() string { return en.key(server.PermTasksRead) }, lapse: func(token string) {
			id := strings.Split(token, "_")[1]
			require.NoError(t, en.st.RevokeAPIKey(context.Background(), id))
		}},
		{name: "expired token", token: func() string {
			return iss.sign(t, jwt.MapClaims{"iss": cfg.Issuer, "aud": cfg.Audience, "sub": "alice",
				"exp": time.Now().Add(2 * time.Second).Unix(), "permissions": []string{"tasks:read"}})
		}, lapse: func(string) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			token := tc.token()
			// The deadline only stops a stream that never ends.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "GET", en.url+"/v1/events", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			tc.lapse(token)

			sc := bufio.NewScanner(resp.Body)
			var event, data string
			for sc.Scan() {
				line := sc.Text()
				if v, ok := strings.CutPrefix(line, "event: "); ok {
					event = v
				}
				if v, ok := strings.CutPrefix(line, "data: "); ok && event == "error" {
					data = v
				}
			}
			require.NoError(t, ctx.Err(), "the stream ended on its own")
			require.Equal(t, "error", event, "the stream's last event says why it ended")
			require.Contains(t, data, `"code":"unauthenticated"`)
		})
	}
}
