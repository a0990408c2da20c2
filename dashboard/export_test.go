package dashboard

// PagePatterns lists the ServeMux patterns of the dashboard's pages.
func PagePatterns() []string {
	var out []string
	for _, p := range (&Dashboard{}).registry() {
		out = append(out, p.Pattern)
	}
	return out
}
