package postgres

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weftrun/weft/internal/sqlstore"
)

// Refused exposes refused to the tests.
var Refused = refused

// NewPoolDB exposes the store's transactions on a pool to the tests.
func NewPoolDB(p *pgxpool.Pool) sqlstore.DB { return newPoolDB(p) }
