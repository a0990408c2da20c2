package weft

import (
	"context"
	"fmt"
	"strings"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/store/sqlite"
)

// DefaultDB is the database used when none is given.
const DefaultDB = "./weft.db"

// OpenStore opens the store a URL names: a file path, "sqlite://PATH" or
// "sqlite:PATH" selects the embedded SQLite store ("" means DefaultDB);
// "postgres://…" or "postgresql://…" selects PostgreSQL (add
// search_path=SCHEMA to keep weft's tables in a schema of their own).
func OpenStore(ctx context.Context, url string, cfg Config) (store.Store, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if isPostgres(url) {
		s, err := postgres.Open(ctx, url, postgres.Options{Aging: cfg.PriorityAging})
		if err != nil {
			return nil, fmt.Errorf("weft: open database %s: %w", redact(url), err)
		}
		return s, nil
	}
	path, err := SQLitePath(url)
	if err != nil {
		return nil, err
	}
	s, err := sqlite.Open(ctx, path, sqlite.Options{Aging: cfg.PriorityAging})
	if err != nil {
		return nil, fmt.Errorf("weft: open database %s: %w", path, err)
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
	case isPostgres(url):
		return "", fmt.Errorf("weft: %s names a PostgreSQL database, not a SQLite file", redact(url))
	}
	path := url
	for _, p := range []string{"sqlite://", "sqlite:"} {
		if strings.HasPrefix(url, p) {
			path = strings.TrimPrefix(url, p)
			break
		}
	}
	if i := strings.Index(path, "://"); i >= 0 {
		return "", fmt.Errorf("weft: unsupported database URL scheme %q (want a file path, sqlite://PATH or postgres://...)", path[:i])
	}
	if path == "" {
		return "", fmt.Errorf("weft: database URL %q names no file", url)
	}
	return path, nil
}

// Open opens the store a URL names (see OpenStore) and returns an engine
// on it. Close the engine to close the store.
func Open(ctx context.Context, url string, cfg Config) (*Engine, error) {
	s, err := OpenStore(ctx, url, cfg)
	if err != nil {
		return nil, err
	}
	e, err := New(s, cfg)
	if err != nil {
		s.Close()
		return nil, err
	}
	e.owns = true
	return e, nil
}

func isPostgres(url string) bool {
	return strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://")
}

// redact hides the password of a URL for messages.
func redact(url string) string {
	at := strings.LastIndex(url, "@")
	scheme := strings.Index(url, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return url
	}
	userinfo := url[scheme+3 : at]
	if user, _, ok := strings.Cut(userinfo, ":"); ok {
		return url[:scheme+3] + user + ":***" + url[at:]
	}
	return url
}
