package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/store/storetest"
)

// sqlTxStore submits in a database/sql transaction of its own, through
// InsertTasksSQLTx: the bulk path of a Querier that cannot COPY.
type sqlTxStore struct{ postgres.Store }

func (s sqlTxStore) InsertTasks(ctx context.Context, tasks []store.TaskInsert) ([]store.InsertResult, error) {
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	res, err := s.InsertTasksSQLTx(ctx, tx, tasks)
	if err != nil {
		return nil, errors.Join(err, tx.Rollback())
	}
	return res, tx.Commit()
}

func TestConformanceSubmitSQLTx(t *testing.T) {
	t.Parallel()
	storetest.RunSubmit(t, func(t *testing.T, clock *storetest.Clock, aging time.Duration) store.Store {
		return sqlTxStore{pgtesting.Open(t, postgres.Options{Clock: clock.Now, Aging: aging, MaxConns: 4})}
	})
}
