// Package weftdb opens weft's store from a URL: a file path (or
// sqlite://PATH) gives the embedded SQLite store, postgres://… gives
// PostgreSQL. It is the only package that imports both backends: a program
// that needs one backend imports store/sqlite or store/postgres directly
// (a PostgreSQL-only program then builds with CGO_ENABLED=0).
package weftdb

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/redact"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/store/sqlite"
)

// DefaultDB is the database used when none is given.
const DefaultDB = "./weft.db"

// Options configures the store Open creates.
type Options struct {
	// PriorityAging is how long a ready step waits to gain one priority
	// level. Default 1m.
	PriorityAging time.Duration
	// ReadOnly opens an existing SQLite file for reading only (no
	// migration; the schema must be current), so that inspecting works on
	// a file or a mount the process may not write. PostgreSQL stores open
	// as usual (grant a read-only role SELECT and run migrations with
	// another), except that a schema without weft's tables is refused
	// rather than created.
	ReadOnly bool
	// Logger receives the store's own warnings (a PostgreSQL listener
	// reconnecting, a migration's notes). Default slog.Default().
	Logger *slog.Logger
}

// Open opens the store a URL names: a file path, "sqlite://PATH" or
// "sqlite:PATH" selects the embedded SQLite store ("" means DefaultDB);
// "postgres://…" or "postgresql://…" selects PostgreSQL (add
// search_path=SCHEMA to keep weft's tables in a schema of their own). The
// schema is created or brought up to date. Close the store when done.
func Open(ctx context.Context, url string, opts Options) (store.Store, error) {
	if opts.PriorityAging <= 0 {
		opts.PriorityAging = time.Minute
	}
	if IsPostgres(url) {
		s, err := postgres.Open(ctx, url, postgres.Options{Aging: opts.PriorityAging, Logger: opts.Logger, Existing: opts.ReadOnly})
		if err != nil {
			// The driver's error may echo the connection string, or parts
			// of it: hide the credentials wherever they appear.
			return nil, fmt.Errorf("weftdb: open database %s: %w", Redact(url), redact.Error(err, url))
		}
		return s, nil
	}
	path, err := SQLitePath(url)
	if err != nil {
		return nil, err
	}
	s, err := sqlite.Open(ctx, path, sqlite.Options{Aging: opts.PriorityAging, ReadOnly: opts.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("weftdb: open database %s: %w", path, err)
	}
	return s, nil
}

// SQLitePath returns the file of the SQLite database a URL names: a file
// path, "sqlite://PATH" or "sqlite:PATH" ("" means DefaultDB). It returns an
// error for a URL that names another kind of database.
func SQLitePath(url string) (string, error) {
	switch {
	case url == "":
		return DefaultDB, nil
	case IsPostgres(url):
		return "", fmt.Errorf("weftdb: %s names a PostgreSQL database, not a SQLite file", Redact(url))
	}
	path := url
	for _, p := range []string{"sqlite://", "sqlite:"} {
		if strings.HasPrefix(url, p) {
			path = strings.TrimPrefix(url, p)
			break
		}
	}
	if i := strings.Index(path, "://"); i >= 0 {
		return "", fmt.Errorf("weftdb: unsupported database URL scheme %q (want a file path, sqlite://PATH or postgres://...)", path[:i])
	}
	if path == "" {
		return "", fmt.Errorf("weftdb: database URL %q names no file", url)
	}
	return path, nil
}

// IsPostgres reports whether a URL names a PostgreSQL database: a
// postgres:// or postgresql:// URL, or a keyword/value DSN that starts with
// one of libpq's keywords ("host=db dbname=weft user=weft").
func IsPostgres(url string) bool {
	if strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://") {
		return true
	}
	key, _, ok := strings.Cut(strings.TrimSpace(url), "=")
	if !ok {
		return false
	}
	switch strings.TrimSpace(key) {
	case "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "sslmode", "service", "application_name", "connect_timeout":
		return true
	}
	return false
}

// Redact hides the credentials of a database URL or DSN, for logs and
// messages: the password of a URL's userinfo (postgres://user:PASSWORD@…),
// a password query parameter (?password=…) and a password keyword of a DSN
// (password=… or password='…'), whatever the password holds (a space, a
// quote, an '@'). Everything weft prints about a database goes through it.
func Redact(url string) string { return redact.Text(url, url) }
