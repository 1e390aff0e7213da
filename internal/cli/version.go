package cli

import (
	"github.com/etcd-steward/steward/internal/version"
	"github.com/spf13/cobra"
)

func newVersionCommand() *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the steward and etcd versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := version.Get()
			return out.print(cmd.OutOrStdout(), v, func(t *table) {
				t.header("COMPONENT", "VERSION")
				t.row("steward", v.Steward)
				t.row("etcd", v.Etcd)
				t.row("go", v.Go)
				if v.Commit != "" {
					t.row("commit", v.Commit)
				}
			})
		},
	}
	out.register(cmd)
	return cmd
}
