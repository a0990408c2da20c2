package weft

import (
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/weftrun/weft/internal/version"
)

func TestBuildFrom(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-11-23T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}
	tests := []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"checkout, modified", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: version.Module, Version: "(devel)"}, Settings: vcs},
			"weft " + Version + " (devel) (commit 0123456789abcdef0123456789abcdef01234567, 2026-11-23T10:00:00Z, modified) go1.26.8"},
		{"released module", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: version.Module, Version: "v1.2.3"}},
			"weft v1.2.3 (no VCS information) go1.26.8"},
		{"dependency of another program", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/app", Version: "(devel)"},
			Deps: []*debug.Module{{Path: version.Module, Version: "v0.9.0"}}}, "weft v0.9.0 (no VCS information) go1.26.8"},
		{"replaced dependency", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: version.Module, Version: "v0.9.0", Replace: &debug.Module{Path: version.Module, Version: "v0.9.1"}}}}, "weft v0.9.1 (no VCS information) go1.26.8"},
		{"clean commit", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: version.Module, Version: "(devel)"}, Settings: vcs[:3]},
			"weft " + Version + " (devel) (commit 0123456789abcdef0123456789abcdef01234567, 2026-11-23T10:00:00Z) go1.26.8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, buildFrom(&tt.bi).String())
		})
	}
	b := buildFrom(&tests[0].bi)
	require.True(t, b.Modified)
	require.Equal(t, time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC), b.Time)
}
