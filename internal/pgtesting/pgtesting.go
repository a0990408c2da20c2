// Package pgtesting gives tests the throwaway PostgreSQL server that
// scripts/test starts (WEFT_TEST_POSTGRES_URL) and stores in schemas of
// their own. Without a server a test is skipped on a developer's machine and
// fails in CI, where the server must be there.
package pgtesting

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/weftrun/weft/store/postgres"
)

// URL returns the test server's URL.
func URL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("WEFT_TEST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("WEFT_TEST_POSTGRES_URL is not set: scripts/test starts a PostgreSQL server for the tests")
		}
		t.Skip("WEFT_TEST_POSTGRES_URL is not set; run ./scripts/test to start a throwaway PostgreSQL")
	}
	return url
}

// SchemaName returns a new random schema name with the given prefix.
func SchemaName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// Open opens a store on the test server in a new schema (opts.Schema is
// ignored), which is dropped and the store closed when the test ends.
func Open(t testing.TB, opts postgres.Options) postgres.Store {
	t.Helper()
	opts.Schema = SchemaName("test")
	s, err := postgres.Open(context.Background(), URL(t), opts)
	if err != nil {
		t.Fatalf("open a PostgreSQL store: %v", err)
	}
	t.Cleanup(func() {
		_, _ = s.DB().ExecContext(context.Background(), `DROP SCHEMA `+opts.Schema+` CASCADE`)
		s.Close()
	})
	return s
}
