package main

import (
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
)

func (a *app) uiCommand() *cobra.Command {
	var (
		addr        string
		requireKeys bool
	)
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Open the dashboard on a local database, on the loopback address",
		Long: `Run the dashboard and the REST API on the database (a SQLite file or any URL)
for one person on this machine: no sign-in, every action allowed, listening
on the loopback address only, until SIGINT or SIGTERM.

It runs no steps: it shows the database and acts on it (submit, cancel,
retry, pause, ...), and the engines of 'weft worker' and 'weft serve' run
the work, whatever the database. Against a shared database, an operator's
machine never takes part in running production steps.

Without sign-in anyone who can reach the address can act, so any address other
than loopback is refused unless --require-keys turns sign-in with an API key
back on ('weft keys create'). Requests naming another host (DNS rebinding) and
cross-site writes are refused.`,
		Example: `  weft ui --db ./weft.db          # then open http://127.0.0.1:8080
  weft ui --addr 0.0.0.0:8080 --require-keys --db postgres://weft@db/weft`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if err := checkHostPort(nil, "addr", addr); err != nil {
				return err
			}
			host, _, _ := net.SplitHostPort(addr)
			if !requireKeys && !loopbackHost(host) {
				return usageErrorf("--addr %q is not a loopback address: 'weft ui' has no sign-in, so it listens on 127.0.0.1, ::1 or localhost only; add --require-keys to sign in with API keys, or use 'weft serve'", addr)
			}
			f := serveFlags{addr: addr, noAuth: !requireKeys, maxBody: 1 << 20, requestTimeout: defaultRequestTimeout, maxPoll: defaultMaxPoll}
			opts, err := f.options(a.config)
			if err != nil {
				return err
			}
			// The engine is never started: its configuration matters only
			// for what the API reports of the defaults.
			cfg := weft.Config{}
			if requireKeys {
				return a.serve(cmd.Context(), listenOn{addr: addr}, cfg, opts, uiShutdown, operateOnly)
			}
			a.notice(slog.LevelWarn, "no sign-in: every request from this machine may act on the database")
			return a.serve(cmd.Context(), listenOn{addr: addr}, cfg, opts, uiShutdown, operateOnly, loopbackOnly)
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "addr", "127.0.0.1:8080", "loopback address to listen on, HOST:PORT")
	fl.BoolVar(&requireKeys, "require-keys", false, "sign in with an API key as 'weft serve' does (then any address is allowed)")
	return localOnlyCommand(cmd, "it serves the dashboard of a database on this machine; open the server's own dashboard in a browser instead")
}

// uiShutdown is how long 'weft ui' waits for requests in flight when it
// stops (it runs no steps to drain).
const uiShutdown = 5 * time.Second

// loopbackHost reports whether a listen or Host name is this machine only.
func loopbackHost(host string) bool {
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackOnly refuses requests whose Host header names anything but this
// machine, so that a web page cannot reach the unauthenticated server
// through a DNS name rebound to 127.0.0.1.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !loopbackHost(host) {
			http.Error(w, "weft ui answers requests for localhost, 127.0.0.1 or [::1] only", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}
