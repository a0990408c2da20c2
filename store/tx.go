package store

import (
	"context"
	"errors"
	"fmt"
)

// TxInserter is implemented by stores that can insert tasks inside a
// transaction the caller opened on the store's database, so that the tasks
// exist only if the caller's transaction commits. Each backend says which
// transaction types it takes; any other is ErrUnsupportedTx.
type TxInserter interface {
	InsertTasksInTx(ctx context.Context, tx any, tasks []TaskInsert) ([]InsertResult, error)
}

// ErrUnsupportedTx reports a transaction of a type the store cannot use.
var ErrUnsupportedTx = errors.New("unsupported transaction type")

// UnsupportedTx returns the error for a transaction of the wrong type.
func UnsupportedTx(tx any, want string) error {
	return fmt.Errorf("%w %T: want %s: %w", ErrUnsupportedTx, tx, want, errors.ErrUnsupported)
}
