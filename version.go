package weft

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/version"
)

// Version is the version of this weft module.
const Version = version.Number

// Build describes the running binary, from the build information the Go
// toolchain embeds in it.
type Build struct {
	// Version is weft's module version: the one a module-aware build
	// recorded ("v1.2.3", a pseudo-version, "(devel)" for a build inside
	// weft's own checkout), else the Version constant.
	Version string `json:"version"`
	// Revision, Time and Modified describe the VCS commit the binary was
	// built from (empty, zero and false when the build did not record it:
	// go build -buildvcs=false, or not in a checkout); Modified is set
	// when the work tree had uncommitted changes.
	Revision string    `json:"revision,omitempty"`
	Time     time.Time `json:"time,omitzero"`
	Modified bool      `json:"modified"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"go_version"`
}

// ReadBuild returns what the running binary records of its build.
func ReadBuild() Build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Build{Version: Version, GoVersion: runtime.Version()}
	}
	return buildFrom(bi)
}

// buildFrom reads a Build from the toolchain's build information.
func buildFrom(bi *debug.BuildInfo) Build {
	b := Build{Version: Version, GoVersion: bi.GoVersion}
	mod := bi.Main
	for _, dep := range bi.Deps {
		if dep.Path == version.Module { // weft as a dependency of another program
			mod = *dep
			if dep.Replace != nil {
				mod = *dep.Replace
			}
		}
	}
	if mod.Path == version.Module && mod.Version != "" && mod.Version != "(devel)" {
		b.Version = mod.Version
	} else if mod.Version == "(devel)" {
		b.Version = Version + " (devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time, _ = time.Parse(time.RFC3339, s.Value)
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the build as "weft VERSION (commit REV, TIME[, modified]) GO".
func (b Build) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "weft %s", b.Version)
	if b.Revision != "" {
		fmt.Fprintf(&s, " (commit %s", b.Revision)
		if !b.Time.IsZero() {
			fmt.Fprintf(&s, ", %s", b.Time.UTC().Format(time.RFC3339))
		}
		if b.Modified {
			s.WriteString(", modified")
		}
		s.WriteString(")")
	} else {
		s.WriteString(" (no VCS information)")
	}
	fmt.Fprintf(&s, " %s", b.GoVersion)
	return s.String()
}
