package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
)

func (a *app) uiCommand() *cobra.Command {
	var (
		eng         engineFlags
		addr        string
		requireKeys bool
	)
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Open the dashboard on a local database, on the loopback address",
		Long: `Run the dashboard and the REST API on the database (a SQLite file or any URL)
for one person on this machine: no sign-in, every action allowed, listening
on the loopback address only. It runs an engine as 'weft serve' does (the
built-in handlers), and stops on SIGINT or SIGTERM.

Without sign-in anyone who can reach the address can act, so any address other
than loopback is refused unless --require-keys turns sign-in with an API key
back on ('weft keys create'). Requests naming another host (DNS rebinding) and
cross-site writes are refused.`,
		Example: `  weft ui --db ./weft.db          # then open http://127.0.0.1:8080
  weft ui --addr 0.0.0.0:8080 --require-keys --db postgres://weft@db/weft`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			cfg, err := eng.config(a.config)
			if err != nil {
				return err
			}
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return usageErrorf("--addr %q: want HOST:PORT", addr)
			}
			if !requireKeys && !loopbackHost(host) {
				return usageErrorf("--addr %q is not a loopback address: 'weft ui' has no sign-in, so it listens on 127.0.0.1, ::1 or localhost only; add --require-keys to sign in with API keys, or use 'weft serve'", addr)
			}
			f := serveFlags{addr: addr, noAuth: !requireKeys, maxBody: 1 << 20, requestTimeout: defaultRequestTimeout, maxPoll: defaultMaxPoll}
			opts, err := f.options()
			if err != nil {
				return err
			}
			if requireKeys {
				return a.serve(cmd.Context(), addr, cfg, opts, eng.drain)
			}
			fmt.Fprintln(a.stderr, "weft: no sign-in: every request from this machine may act on the database")
			return a.serve(cmd.Context(), addr, cfg, opts, eng.drain, loopbackOnly)
		}),
	}
	fl := cmd.Flags()
	eng.add(fl, "on shutdown, how long to wait for running steps before stopping them")
	fl.StringVar(&addr, "addr", "127.0.0.1:8080", "loopback address to listen on, HOST:PORT")
	fl.BoolVar(&requireKeys, "require-keys", false, "sign in with an API key as 'weft serve' does (then any address is allowed)")
	return localOnlyCommand(cmd, "it serves the dashboard of a database on this machine; open the server's own dashboard in a browser instead")
}

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
