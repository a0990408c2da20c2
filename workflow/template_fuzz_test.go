package workflow

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseTemplate checks that no input makes ParseTemplate panic, that
// every error it reports is a *DefinitionError naming the file, and that a
// template it accepts validates and has JSON-object configs.
func FuzzParseTemplate(f *testing.F) {
	paths, err := filepath.Glob(filepath.Join("testdata", "templates", "*.yaml"))
	require.NoError(f, err)
	require.NotEmpty(f, paths)
	for _, p := range paths {
		data, err := os.ReadFile(p)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte(tplHeader + "steps: [{name: a, handler: h, config: {<<: {x: 1}, y: [*z]}}]\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte(dynamicTemplate))

	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := Parse("fuzz.yaml", data)
		if err != nil {
			require.Nil(t, w)
			errs := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			}
			for _, e := range errs {
				var de *DefinitionError
				require.True(t, errors.As(e, &de), "want *DefinitionError, got %T: %v", e, e)
				require.Equal(t, "fuzz.yaml", de.File)
			}
			return
		}
		require.NoError(t, w.Validate())
		for _, s := range w.Steps {
			if s.Config != nil {
				var m map[string]any
				require.NoError(t, json.Unmarshal(s.Config, &m), "config %s", s.Config)
				require.NotNil(t, m)
			}
		}
	})
}
