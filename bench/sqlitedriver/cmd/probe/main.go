// Command probe is a minimal weft-shaped program for measuring each driver's
// build time and binary size: it opens a database with the benchmark DSN,
// inserts and claims a few steps, and prints the SQLite version.
//
//	go build -tags mattn|modernc|ncruces ./cmd/probe
package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/weftrun/weft/bench/sqlitedriver"
)

// stamp is set with -ldflags -X by buildcost.sh to force a relink.
var stamp string

func main() {
	_ = stamp
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "weft-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sqlitedriver.Open(filepath.Join(dir, "weft.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx := context.Background()
	ins, err := db.Prepare(sqlitedriver.InsertSQL)
	if err != nil {
		return err
	}
	var next int64
	if err := sqlitedriver.Fill(ctx, db, ins, rand.New(rand.NewPCG(1, 2)), &next, 500, 100); err != nil {
		return err
	}
	rows, err := db.Query(sqlitedriver.ClaimSQL, "probe")
	if err != nil {
		return err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	var version, journal string
	db.QueryRow("SELECT sqlite_version()").Scan(&version)
	db.QueryRow("PRAGMA journal_mode").Scan(&journal)
	fmt.Printf("driver=%s sqlite=%s journal_mode=%s claimed=%d\n", sqlitedriver.DriverLabel, version, journal, n)
	return rows.Err()
}
