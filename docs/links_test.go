// Package docs holds weft's user documentation; its test checks that the
// pages' links lead somewhere.
package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`^#{1,6} (.+)$`)
	slugDrop  = regexp.MustCompile(`[^a-z0-9 _-]`)
)

// TestLinksResolve: every relative link of the docs and the README names a
// file that exists and, with a #fragment, a heading of that page (as
// GitHub writes heading anchors).
func TestLinksResolve(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("*.md")
	require.NoError(t, err)
	pages = append(pages, filepath.Join("..", "README.md"))
	require.Greater(t, len(pages), 5)
	anchors := map[string]map[string]bool{}
	for _, page := range pages {
		body, err := os.ReadFile(page)
		require.NoError(t, err)
		for _, m := range linkRE.FindAllStringSubmatch(string(body), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, fragment, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
			}
			_, err := os.Stat(file)
			require.NoError(t, err, "%s links to %s, which does not exist", page, target)
			if fragment == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			if anchors[file] == nil {
				anchors[file] = headingAnchors(t, file)
			}
			require.True(t, anchors[file][fragment], "%s links to %s: %s has no heading #%s", page, target, file, fragment)
		}
	}
}

// headingAnchors returns the anchors of a page's headings, outside code
// blocks: lower case, spaces as hyphens, punctuation dropped.
func headingAnchors(t *testing.T, file string) map[string]bool {
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	out := map[string]bool{}
	inCode := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if m := headingRE.FindStringSubmatch(line); m != nil && !inCode {
			slug := slugDrop.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), "")
			out[strings.ReplaceAll(slug, " ", "-")] = true
		}
	}
	require.NoError(t, sc.Err())
	return out
}
