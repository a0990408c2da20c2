package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
)

func (a *app) versionCommand() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS commit and Go version of this binary",
		Long: `Print weft's module version, the VCS commit it was built from (with its time,
and "modified" when the work tree had uncommitted changes) and the Go version
that built it, as the binary's build information records them. A binary
built with -buildvcs=false, or outside a checkout, has no commit to show.`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			b := weft.ReadBuild()
			if jsonOut {
				return writeJSON(a.stdout, b)
			}
			fmt.Fprintln(a.stdout, b.String())
			return nil
		}),
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the build as JSON")
	return cmd
}
