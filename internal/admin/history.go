package admin

import (
	"context"

	"github.com/weftrun/weft/store"
)

// History reads the durable history of transitions (see store.History).
func (a *Admin) History(ctx context.Context, q store.HistoryQuery) ([]store.HistoryEvent, error) {
	events, err := a.store.History(ctx, q)
	if err != nil {
		return nil, err
	}
	return events, nil
}

// HistoryEnd returns a cursor after the events committed so far.
func (a *Admin) HistoryEnd(ctx context.Context) (string, error) {
	end, err := a.store.HistoryEnd(ctx)
	if err != nil {
		return "", err
	}
	return end, nil
}
