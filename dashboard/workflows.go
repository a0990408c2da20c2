package dashboard

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/workflow"
)

type workflowRow struct {
	Namespace, Name string
	Versions        []string
	Latest          time.Time
}

func (d *Dashboard) workflows(r *http.Request) (string, any, error) {
	recs, err := d.in(r).Workflows(r.Context())
	if err != nil {
		return "", nil, err
	}
	byName := map[[2]string]*workflowRow{}
	var rows []*workflowRow
	for _, rec := range recs {
		k := [2]string{rec.Namespace, rec.Name}
		row := byName[k]
		if row == nil {
			row = &workflowRow{Namespace: rec.Namespace, Name: rec.Name}
			byName[k] = row
			rows = append(rows, row)
		}
		row.Versions = append(row.Versions, rec.Version)
		if rec.CreatedAt.After(row.Latest) {
			row.Latest = rec.CreatedAt
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Namespace != rows[j].Namespace {
			return rows[i].Namespace < rows[j].Namespace
		}
		return rows[i].Name < rows[j].Name
	})
	return "Workflows", rows, nil
}

type workflowData struct {
	Namespace, Name, Version string
	Versions                 []versionRow
	Def                      *workflow.Workflow
	DAG                      template.HTML
	Definition               json.RawMessage
	// Groups are the graph's groups of similar steps, with the links that
	// expand or fold them.
	Groups []groupLink
}

type versionRow struct {
	Version   string
	CreatedAt time.Time
}

func (d *Dashboard) workflow(r *http.Request) (string, any, error) {
	ns, name, version := r.PathValue("namespace"), r.PathValue("name"), r.URL.Query().Get("version")
	recs, err := d.in(r).Workflows(r.Context())
	if err != nil {
		return "", nil, err
	}
	data := workflowData{Namespace: ns, Name: name}
	var newest time.Time
	for _, rec := range recs {
		if rec.Namespace != ns || rec.Name != name {
			continue
		}
		data.Versions = append(data.Versions, versionRow{rec.Version, rec.CreatedAt})
		if version == "" && !rec.CreatedAt.Before(newest) {
			newest, data.Version = rec.CreatedAt, rec.Version
		}
	}
	if version != "" {
		data.Version = version
	}
	if len(data.Versions) == 0 {
		return "", nil, fmt.Errorf("workflow %s/%s: %w", ns, name, weft.ErrNotFound)
	}
	sort.Slice(data.Versions, func(i, j int) bool { return data.Versions[i].CreatedAt.After(data.Versions[j].CreatedAt) })
	rec, err := d.in(r).Registered(r.Context(), ns, name, data.Version)
	if err != nil {
		return "", nil, err
	}
	data.Definition = rec.Definition
	def, err := d.in(r).Workflow(r.Context(), ns, name, data.Version)
	if err != nil {
		return "", nil, err
	}
	data.Def = def
	vs := make([]vertex, len(def.Steps))
	for i, s := range def.Steps {
		vs[i] = vertex{Name: s.Name, Kind: string(s.Type), Does: s.Handler + "\x00" + s.Worker, Deps: s.DependsOn}
	}
	expanded := map[string]bool{}
	for _, e := range r.URL.Query()["expand"] {
		expanded[e] = true
	}
	groups, edges, opened := drawnGraph(vs, expanded)
	nodes := make([]node, len(groups))
	for n, g := range groups {
		s := def.Steps[g.Steps[0]]
		sub := s.Handler
		if s.Type != "" {
			sub = string(s.Type) + " · " + sub
		}
		if !g.Group {
			nodes[n] = node{Key: s.Name, Label: s.Name, Sub: sub, State: "definition"}
			continue
		}
		label := fmt.Sprintf("%s ×%s", g.Key, thousands(len(g.Steps)))
		nodes[n] = node{Key: g.Key, Label: label, Sub: sub, State: "definition", Counts: []stateCount{},
			Title: fmt.Sprintf("%s … %s: %s steps running %s", s.Name, def.Steps[g.Steps[len(g.Steps)-1]].Name, thousands(len(g.Steps)), s.Handler)}
		if !g.Rest {
			data.Groups = append(data.Groups, groupLink{Label: label, Link: "?" + url.Values{"version": {data.Version}, "expand": {g.Key}}.Encode() + "#dag"})
		}
	}
	for _, e := range opened {
		data.Groups = append(data.Groups, groupLink{Label: e, Link: "?" + url.Values{"version": {data.Version}}.Encode() + "#dag", Expanded: true})
	}
	data.DAG = dagSVG(nodes, edges, fmt.Sprintf("Graph of the %s of %s/%s@%s by dependency, a column per depth, %s. The table of steps, below, lists them with their dependencies.",
		plural(len(def.Steps), "step"), ns, name, data.Version, drawnAs(len(def.Steps), len(nodes))))
	return ns + "/" + name, data, nil
}
