package sqlite

import (
	"context"
	"fmt"
)

// Refused exposes refused to the tests.
var Refused = refused

// MemoryCounted exposes memoryCounted to the tests.
var MemoryCounted = memoryCounted

// SetMaxPageCount sets PRAGMA max_page_count on the store's writer
// connection (0: the number of pages the file has now), so that writes
// needing more pages fail with SQLITE_FULL as on a full disk.
func (s Store) SetMaxPageCount(ctx context.Context, n int64) error {
	if n == 0 {
		rows, err := s.db.Query(ctx, "PRAGMA page_count")
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			return rows.Err()
		}
		if err := rows.Scan(&n); err != nil {
			return err
		}
	}
	_, err := s.db.Exec(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", n))
	return err
}

// Unavailable exposes unavailable to the tests.
var Unavailable = unavailable
