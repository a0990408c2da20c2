package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/dashboard"
	"github.com/weftrun/weft/internal/config"
	"github.com/weftrun/weft/internal/redact"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/weftdb"
)

// The defaults of --request-timeout and --max-poll.
const (
	defaultRequestTimeout = 30 * time.Second
	defaultMaxPoll        = 30 * time.Second
)

// serveFlags are the flags of `weft serve`.
type serveFlags struct {
	addr           string
	noAuth         bool
	jwtIssuer      string
	jwtAudience    string
	jwtPublicKey   string
	jwtJWKS        string
	jwtNamespaces  string
	metricsAddr    string
	maxBody        int64
	maxBacklog     int
	requestTimeout time.Duration
	maxPoll        time.Duration
	tlsCert        string
	tlsKey         string
	trustedProxies []string
}

func (a *app) serveCommand() *cobra.Command {
	var (
		eng engineFlags
		f   serveFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run an engine and the HTTP API until signalled",
		Long: `Run an engine on the database together with the REST API (under /v1), the
remote-worker protocol, health checks (/health/live, /health/ready) and
Prometheus metrics (/metrics), until SIGINT or SIGTERM.

The same address serves the gRPC API (weft.v1.TaskService and
weft.v1.WorkerService, with server reflection): gRPC over HTTP/2, cleartext
or with --tls-cert, and gRPC-Web and Connect over HTTP/1.1; see docs/grpc.md.

The dashboard is served at / (sign in with an API key; see docs/dashboard.md).

The engine runs the built-in handlers (exec, http); steps whose handlers are
served by remote workers are claimed only by those workers. Requests
authenticate with an API key ('weft keys create') or, with --jwt-issuer, an
RS256 JWT. --insecure-no-auth turns authentication off for local development.

On a signal the server stops accepting requests, finishes those in flight, and
the engine drains its running steps for up to --drain.`,
		Example: `  weft keys create --name ci --permissions tasks:create,tasks:read
  weft serve --addr 127.0.0.1:8080 --db postgres://weft@db/weft`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			cfg, err := eng.config(a.config)
			if err != nil {
				return err
			}
			opts, err := f.options(a.config)
			if err != nil {
				return err
			}
			tc, err := f.tlsConfig(a.config)
			if err != nil {
				return err
			}
			return a.serve(cmd.Context(), listenOn{addr: f.addr, tls: tc, metrics: f.metricsAddr}, cfg, opts, eng.drain, runSteps)
		}),
	}
	fl := cmd.Flags()
	eng.add(fl, "on shutdown, how long to wait for running steps before stopping them")
	fl.StringVar(&f.addr, "addr", "127.0.0.1:8080", "address to listen on, HOST:PORT")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve /metrics on this HOST:PORT instead of the API's address, where it shows every namespace's counts to anyone (default: on the API's address)")
	fl.BoolVar(&f.noAuth, "insecure-no-auth", false, "serve without authentication: every request has every permission (development only)")
	fl.StringVar(&f.jwtIssuer, "jwt-issuer", "", "accept RS256 JWTs from this issuer (iss)")
	fl.StringVar(&f.jwtAudience, "jwt-audience", "", "audience (aud) JWTs must name")
	fl.StringVar(&f.jwtPublicKey, "jwt-public-key", "", "PEM file of the RSA public key that signs JWTs")
	fl.StringVar(&f.jwtJWKS, "jwt-jwks-url", "", "URL of the JWKS with the keys that sign JWTs")
	fl.StringVar(&f.jwtNamespaces, "jwt-namespaces-claim", "", "JWT claim that lists the namespaces where the token's permissions hold (a token without it is refused)")
	fl.Int64Var(&f.maxBody, "max-body", 1<<20, "largest request body accepted, in bytes")
	fl.IntVar(&f.maxBacklog, "max-backlog", 0, "refuse new tasks (503) while this many are pending or running; 0: no limit")
	fl.DurationVar(&f.requestTimeout, "request-timeout", defaultRequestTimeout, "longest time a request may take (long polls excepted)")
	fl.DurationVar(&f.maxPoll, "max-poll", defaultMaxPoll, "longest time a remote worker's claim waits for work")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate (chain) file: serve HTTPS (with --tls-key)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM private key file of --tls-cert")
	fl.StringSliceVar(&f.trustedProxies, "trusted-proxy", nil, "address or CIDR of a reverse proxy whose X-Forwarded-Proto is believed (repeatable): "+
		"the dashboard's session cookie is Secure behind it when the client used https")
	return localOnlyCommand(cmd, "it runs an engine and the API on the database")
}

// options validates the flags and returns the server's options; c
// (which may be nil) names where a refused value came from, and shows it
// (config.Layers.Show).
func (f *serveFlags) options(c *config.Layers) (server.Options, error) {
	o := server.Options{DisableAuth: f.noAuth, MaxBodyBytes: f.maxBody, MaxBacklog: f.maxBacklog, RequestTimeout: f.requestTimeout, MaxPoll: f.maxPoll}
	if err := checkHostPort(c, "addr", f.addr); err != nil {
		return o, err
	}
	if f.metricsAddr != "" {
		if err := checkHostPort(c, "metrics-addr", f.metricsAddr); err != nil {
			return o, err
		}
		o.MetricsElsewhere = true
	}
	if f.maxBody < 1 {
		return o, usageErrorf("%s must be at least 1, got %s", c.Describe("max-body"), c.Show("max-body", strconv.FormatInt(f.maxBody, 10)))
	}
	if f.maxBacklog < 0 {
		return o, usageErrorf("%s must not be negative, got %s", c.Describe("max-backlog"), c.Show("max-backlog", strconv.Itoa(f.maxBacklog)))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"request-timeout", f.requestTimeout}, {"max-poll", f.maxPoll}} {
		if d.v <= 0 {
			return o, usageErrorf("%s must be more than 0, got %s", c.Describe(d.flag), c.Show(d.flag, d.v.String()))
		}
	}
	for _, p := range f.trustedProxies {
		prefix, err := parsePrefix(p)
		if err != nil {
			return o, usageErrorf("%s %q: want an IP address or a CIDR such as 10.0.0.0/8", c.Describe("trusted-proxy"), c.Show("trusted-proxy", p))
		}
		o.TrustedProxies = append(o.TrustedProxies, prefix)
	}
	jwtSet := f.jwtIssuer != "" || f.jwtAudience != "" || f.jwtPublicKey != "" || f.jwtJWKS != "" || f.jwtNamespaces != ""
	if !jwtSet {
		return o, nil
	}
	if f.jwtIssuer == "" || f.jwtAudience == "" {
		return o, usageErrorf("JWTs need both --jwt-issuer and --jwt-audience")
	}
	if (f.jwtPublicKey == "") == (f.jwtJWKS == "") {
		return o, usageErrorf("JWTs need exactly one of --jwt-public-key and --jwt-jwks-url")
	}
	if strings.TrimSpace(f.jwtNamespaces) != f.jwtNamespaces || strings.ContainsAny(f.jwtNamespaces, " \t\n\r") {
		return o, usageErrorf("%s %q: a claim's name holds no spaces", c.Describe("jwt-namespaces-claim"), c.Show("jwt-namespaces-claim", f.jwtNamespaces))
	}
	j := &server.JWTConfig{Issuer: f.jwtIssuer, Audience: f.jwtAudience, JWKSURL: f.jwtJWKS, NamespacesClaim: f.jwtNamespaces}
	if f.jwtPublicKey != "" {
		pem, err := os.ReadFile(f.jwtPublicKey)
		if err != nil {
			err = redact.PathCause(err) // the path is named through Show
			return o, usageErrorf("%s: read %q: %v", c.Describe("jwt-public-key"), c.Show("jwt-public-key", f.jwtPublicKey), err)
		}
		j.PublicKeyPEM = pem
	}
	if f.jwtJWKS != "" {
		if u, err := url.Parse(f.jwtJWKS); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return o, usageErrorf("%s: %q is not an http or https URL", c.Describe("jwt-jwks-url"), c.Show("jwt-jwks-url", f.jwtJWKS))
		}
	}
	o.JWT = j
	return o, nil
}

// parsePrefix reads a CIDR or a single address.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// tlsConfig loads --tls-cert and --tls-key: nil without them.
func (f *serveFlags) tlsConfig(c *config.Layers) (*tls.Config, error) {
	if f.tlsCert == "" && f.tlsKey == "" {
		return nil, nil
	}
	if f.tlsCert == "" || f.tlsKey == "" {
		return nil, usageErrorf("HTTPS needs both %s and %s", c.Describe("tls-cert"), c.Describe("tls-key"))
	}
	cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
	if err != nil {
		err = redact.PathCause(err) // the files are named through Show
		return nil, usageErrorf("%s %q, %s %q: %v", c.Describe("tls-cert"), c.Show("tls-cert", f.tlsCert),
			c.Describe("tls-key"), c.Show("tls-key", f.tlsKey), err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// serveProtocols are the protocols weft serve speaks: HTTP/1.1, HTTP/2
// over TLS, and HTTP/2 cleartext for gRPC clients.
func serveProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// listenOn is where the API listens: an address, and TLS when set.
type listenOn struct {
	addr string
	tls  *tls.Config
	// metrics, if set, is where /metrics is served instead of addr.
	metrics string
}

// checkHostPort checks addr, the value of flag, as an address to listen
// on: HOST:PORT with a port from 0 to 65535 (or a service's name). c (which
// may be nil) names where the value came from.
func checkHostPort(c *config.Layers, flag, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return usageErrorf("%s %q: want HOST:PORT, with a port from 0 to 65535", c.Describe(flag), c.Show(flag, addr))
	}
	return nil
}

// listenError is the error of a failure to listen on addr, the value of
// flag: it quotes addr through config.Layers.Show, and of err only the
// cause, as a net.OpError, a net.AddrError and a net.DNSError quote the
// address or its host as they are.
func (a *app) listenError(flag, addr string, err error) error {
	cause := err.Error()
	if e, ok := errors.AsType[*net.DNSError](err); ok {
		cause = e.Err
	} else if e, ok := errors.AsType[*net.AddrError](err); ok {
		cause = e.Err
	} else if e, ok := errors.AsType[*net.OpError](err); ok {
		cause = e.Err.Error() // a system call's, as "bind: address already in use"
	}
	return fmt.Errorf("%s: listen on %q: %s", a.config.Describe(flag), a.config.Show(flag, addr), cause)
}

// serveMode says whether a served engine runs steps.
type serveMode int

const (
	// runSteps starts the engine: it joins the cluster, claims the steps
	// of the built-in handlers and takes its turn at maintenance (weft
	// serve).
	runSteps serveMode = iota
	// operateOnly never starts the engine: the API and the dashboard
	// read, submit and act on the database, and nothing runs here (weft
	// ui, so that an operator's laptop runs no production steps).
	operateOnly
)

// serve runs the API on an engine until ctx is done.
// The dashboard is served at / (package dashboard). wrap, if given, wraps
// the handler (weft ui guards its Host header with it).
func (a *app) serve(ctx context.Context, on listenOn, cfg weft.Config, opts server.Options, drain time.Duration, mode serveMode, wrap ...func(http.Handler) http.Handler) error {
	if mode == runSteps {
		a.runsEngine()
	}
	how := createDB
	if mode == operateOnly {
		how = existingDB // the dashboard of a database that is not there shows nothing
	}
	de, err := a.open(ctx, cfg, how)
	if err != nil {
		return err
	}
	defer a.closeEngine(de)
	e := de.Engine
	opts.Logger = a.log
	opts.UI = dashboard.New
	srv, err := server.New(e, opts)
	if err != nil {
		return usageErrorf("%v", err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", on.addr)
	if err != nil {
		return a.listenError("addr", on.addr, err)
	}
	scheme := "http"
	if on.tls != nil {
		// HTTP/2 for gRPC clients, offered first; HTTP/1.1 for the rest.
		tc := on.tls.Clone()
		tc.NextProtos = []string{"h2", "http/1.1"}
		ln, scheme = tls.NewListener(ln, tc), "https"
	}
	if on.metrics != "" {
		stop, err := a.listenMetrics(e, on.metrics, srv.MetricsHandler())
		if err != nil {
			ln.Close()
			return err
		}
		defer stop()
	}
	if mode == runSteps {
		if err := e.Start(ctx); err != nil {
			ln.Close()
			return fmt.Errorf("start engine: %w", err)
		}
	}
	var handler http.Handler = srv
	for _, w := range wrap {
		handler = w(handler)
	}
	hs := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       opts.RequestTimeout,
		WriteTimeout:      opts.RequestTimeout + opts.MaxPoll + 5*time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          nil,
		// HTTP/2 cleartext (prior knowledge, as gRPC clients speak it
		// without TLS) beside HTTP/1.1 and, over TLS, HTTP/2: the gRPC
		// API shares the port with REST.
		Protocols: serveProtocols(),
	}
	hs.RegisterOnShutdown(srv.CloseStreams)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	// The address line lets scripts (and tests) find a port chosen by :0.
	url := fmt.Sprintf("%s://%s", scheme, ln.Addr())
	a.notice(slog.LevelInfo, "serving on "+url, "url", url)
	a.log.Info("serving gRPC on the same address: gRPC over HTTP/2 (cleartext or TLS), gRPC-Web and Connect, with reflection",
		"services", strings.Join(server.GRPCServices, ","))
	if mode == runSteps {
		a.log.Info("serving", "addr", ln.Addr().String(), "db", weftdb.Redact(a.dbURL()), "engine_id", e.ID(), "auth", !opts.DisableAuth)
	} else {
		a.log.Info("serving", "addr", ln.Addr().String(), "db", weftdb.Redact(a.dbURL()), "auth", !opts.DisableAuth, "runs_steps", false)
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	a.log.Info("shutting down", "drain", drain)
	stopCtx, cancel := a.stopContext(ctx, drain)
	defer cancel()
	// The engine stops claiming at once, its remote workers' waiting
	// claims end empty, and its running steps drain while the requests in
	// flight end: neither waits for the other to begin.
	stopped := make(chan error, 1)
	go func() { stopped <- e.Stop(stopCtx) }()
	if err := hs.Shutdown(stopCtx); err != nil {
		a.log.Warn("requests still in flight at the deadline were cut", "error", err)
	}
	if err := <-stopped; err != nil {
		return fmt.Errorf("stop engine: %w", err)
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", serveErr)
	}
	return nil
}
