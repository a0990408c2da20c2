package weftdb_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/weftrun/weft/weftdb"
)

// Open with a file path gives the embedded SQLite store, created with its
// schema if the file does not exist; a postgres:// URL would give
// PostgreSQL. Hand the store to weft.New, and close it after stopping the
// engine.
func ExampleOpen() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "weft.db")

	db, err := weftdb.Open(ctx, path, weftdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	workflows, err := db.ListWorkflows(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, statErr := os.Stat(path)
	fmt.Println("file created:", statErr == nil, "workflows:", len(workflows))
	// Output:
	// file created: true workflows: 0
}

// SQLitePath says which file a URL names, and refuses URLs of other
// databases.
func ExampleSQLitePath() {
	for _, url := range []string{"", "data/weft.db", "sqlite:///var/lib/weft.db", "postgres://weft@db/weft", "mysql://db/weft"} {
		path, err := weftdb.SQLitePath(url)
		fmt.Printf("%q: %q %v\n", url, path, err)
	}
	// Output:
	// "": "./weft.db" <nil>
	// "data/weft.db": "data/weft.db" <nil>
	// "sqlite:///var/lib/weft.db": "/var/lib/weft.db" <nil>
	// "postgres://weft@db/weft": "" weftdb: postgres://weft@db/weft names a PostgreSQL database, not a SQLite file
	// "mysql://db/weft": "" weftdb: unsupported database URL scheme "mysql" (want a file path, sqlite://PATH or postgres://...)
}

// Redact hides the password of a database URL, for logs and messages.
func ExampleRedact() {
	fmt.Println(weftdb.Redact("postgres://weft:s3cret@db.internal:5432/weft?sslmode=require"))
	fmt.Println(weftdb.Redact("postgres://weft@db.internal/weft"))
	// Output:
	// postgres://weft:***@db.internal:5432/weft?sslmode=require
	// postgres://weft@db.internal/weft
}
