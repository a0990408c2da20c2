package dashboard

import "github.com/weftrun/weft/server"

// PagePatterns lists the ServeMux patterns of the dashboard's pages.
func PagePatterns() []string {
	var out []string
	for _, p := range (&Dashboard{}).registry() {
		out = append(out, p.Pattern)
	}
	return out
}

// Pages lists the dashboard's pages as a server's dashboard serves them.
func Pages(srv *server.Server) []Page {
	d, err := build(srv)
	if err != nil {
		panic(err)
	}
	var out []Page
	for _, p := range d.pages {
		out = append(out, p.Page)
	}
	return out
}
