package sqldb

import (
	"errors"
	"fmt"

	"github.com/weftrun/weft/store"
)

// Classifier tells what an error of the driver means for a write. Each
// backend supplies one for its driver's errors.
type Classifier interface {
	// Refused reports whether an error of the driver is the database
	// refusing a statement for what it carries or does (a value it cannot
	// store, a constraint, a limit), which trying again cannot cure, as
	// opposed to a passing failure (a lost connection, a deadlock, a
	// timeout).
	Refused(err error) bool
	// Unavailable reports whether an error of the driver says the
	// database cannot write for now, for a reason outside it that passes
	// when the reason does (SQLite: a full disk, the disk failing a
	// write), as an unreachable server's does on PostgreSQL.
	Unavailable(err error) bool
	// Contended reports whether an error of the driver is the database
	// giving up a transaction for its clash with concurrent ones (a
	// serialization failure, a deadlock), which the same transaction run
	// again may pass.
	Contended(err error) bool
}

// WriteErr marks an error of a write as c classifies it: store.Refused
// where the database refused the statement or its data, store.ErrUnavailable
// where it cannot write for now (the API answers 503 and callers retry),
// store.ErrContended where it gave the transaction up for its clash with
// concurrent ones (the store runs such a write again a few times first).
func WriteErr(c Classifier, err error) error {
	switch {
	case err == nil:
	case c.Refused(err):
		return store.Refused(err)
	case !errors.Is(err, store.ErrUnavailable) && c.Unavailable(err):
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	case !errors.Is(err, store.ErrContended) && c.Contended(err):
		return fmt.Errorf("%w: %w", store.ErrContended, err)
	}
	return err
}
