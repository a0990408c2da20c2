package dashboard

import (
	"net/http"
	"sort"
	"time"

	"github.com/weftrun/weft/store"
)

type workersData struct {
	Engines, Workers []workerRow
	LeaseTTL         time.Duration
}

type workerRow struct {
	store.EngineInfo
	Stale bool
}

func (d *Dashboard) workers(r *http.Request) (string, any, error) {
	// ListWorkers fills each holder's handlers and held steps.
	list, err := d.in(r).Workers(r.Context())
	if err != nil {
		return "", nil, err
	}
	ttl := d.in(r).LeaseTTL()
	data := workersData{LeaseTTL: ttl}
	now := d.now()
	for _, e := range list {
		row := workerRow{EngineInfo: e, Stale: now.Sub(e.HeartbeatAt) > ttl}
		if e.Worker {
			data.Workers = append(data.Workers, row)
		} else {
			data.Engines = append(data.Engines, row)
		}
	}
	for _, rows := range [][]workerRow{data.Engines, data.Workers} {
		sort.Slice(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })
	}
	return "Workers", data, nil
}
