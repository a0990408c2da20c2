package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/store"
)

// TestAnswersThatAreNotWeft: a server that answers 2xx with something
// other than weft's JSON (a proxy's sign-in page, an empty body) is an
// error for every call, those that read no value included, and its 404
// says nothing of the task; Follow ends on an answer that is not an event
// stream instead of reconnecting for ever.
func TestAnswersThatAreNotWeft(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		status      int
		contentType string
		body        string
	}{
		{"html", 200, "text/html", "<html>sign in</html>"},
		{"empty", 200, "", ""},
		{"empty json", 200, "application/json", ""},
		{"no content for a value", 204, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.contentType != "" {
					w.Header().Set("Content-Type", tc.contentType)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c, err := client.New(srv.URL, "")
			require.NoError(t, err)
			_, err = c.Get(t.Context(), 1)
			require.ErrorContains(t, err, "not weft's JSON", "a value")
			if tc.status != 204 {
				require.ErrorContains(t, c.Cancel(t.Context(), 1, ""), "not weft's JSON", "no value")
				_, err = c.Pause(t.Context(), "shop", "")
				require.ErrorContains(t, err, "not weft's JSON")
			}
			err = c.Follow(t.Context(), client.EventFilter{}, func(client.Event) error { return nil })
			require.Error(t, err, "Follow ends")
		})
	}
	t.Run("a 404 of another server", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		defer srv.Close()
		c, err := client.New(srv.URL+"/prefix", "")
		require.NoError(t, err)
		_, err = c.Get(t.Context(), 1)
		require.Error(t, err)
		require.False(t, errors.Is(err, store.ErrNotFound), "not weft's 404: %v", err)
	})
	for _, base := range []string{"http://h:1?x=1", "http://h:1#frag", "http://h:1?"} {
		_, err := client.New(base, "")
		require.ErrorContains(t, err, "a query or fragment is not", base)
		_, err = client.NewGRPC(base, "")
		require.ErrorContains(t, err, "a query or fragment is not", "gRPC: %s", base)
	}
}
