package sqlstore

import (
	"context"
	"fmt"
	"sort"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/store"
)

// This file holds the handlers engines and remote workers advertise, and
// the list of them with what they hold.

// SetHandlers replaces the handlers an engine or worker serves.
func (s *maintenance) SetHandlers(ctx context.Context, engineID string, handlers []string) error {
	return s.write(ctx, engineID, func(t *transition.Tx) error { return t.SetHandlers(engineID, handlers) })
}

// ListWorkers returns the live engines and workers with their handlers and
// the number of steps each holds.
func (s *maintenance) ListWorkers(ctx context.Context) ([]store.EngineInfo, error) {
	engines, err := s.ListEngines(ctx)
	if err != nil {
		return nil, err
	}
	if len(engines) == 0 {
		return engines, nil
	}
	at := make(map[string]int, len(engines))
	ids := make([]any, len(engines))
	for i, e := range engines {
		at[e.ID], ids[i] = i, e.ID
	}
	list := sqltx.Placeholders(len(ids))
	type pair struct{ id, v string }
	rows, err := s.Read(ctx, `SELECT engine_id, handler FROM engine_handlers WHERE engine_id IN (`+list+`)`, ids...)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	handlers, err := sqldb.Collect(rows, func(r sqldb.Row) (pair, error) {
		var p pair
		err := r.Scan(&p.id, &p.v)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	for _, p := range handlers {
		e := &engines[at[p.id]]
		e.Handlers = append(e.Handlers, p.v)
	}
	held, err := s.CountHeld(ctx)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	for i := range engines {
		engines[i].Held = held[engines[i].ID]
	}
	for i := range engines {
		sort.Strings(engines[i].Handlers)
	}
	return engines, nil
}
