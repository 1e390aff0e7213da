package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/units"
)

func newBackupCompactCommand() *cobra.Command {
	var (
		sf       storeFlags
		scratch  string
		timeline uint32
		leaseTTL int64
		out      outputFlag
		verbose  bool
	)
	cmd := &cobra.Command{
		Use:   "compact",
		Short: "Fold the deltas into a new full snapshot at the newest revision, so restores stay short",
		Long: `Compact restores the newest backed-up revision into a scratch data dir, compacts away the
history before it, defragments the database, and uploads it as a new full snapshot at that
revision (with the chain's cluster ID), on the same timeline: the newest, or --timeline.
Keys whose lease was granted after the newest full snapshot get a lease record with
--missing-lease-ttl in it, as a restore gives them, so they expire after any restore from it.
Later restores start from it instead of replaying the deltas. Nothing is deleted: the older objects follow the retention policy ('steward backup gc').

The scratch dir needs room for about twice the database; it is removed on every exit path.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := out.check(); err != nil {
				return err
			}
			s, err := sf.open(ctx)
			if err != nil {
				return err
			}
			defer s.Close()
			o := restore.CompactOptions{Store: s, Timeline: timeline, ScratchDir: scratch, MissingLeaseTTL: leaseTTL}
			if verbose {
				if o.Logger, err = newLogger("info"); err != nil {
					return err
				}
			}
			prog := &phaseProgress{w: cmd.ErrOrStderr()}
			o.Progress = prog.update
			defer restore.HeapBound.Apply()()
			res, err := restore.Compact(ctx, o)
			prog.done()
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res, func(t *table) {
				if res.Skipped != "" {
					t.row("nothing to compact: " + res.Skipped)
					return
				}
				t.row(fmt.Sprintf("stored %s at revision %d", res.Key, res.Revision))
				t.row(fmt.Sprintf("  from %s and %d deltas", res.Restore.Full.Key, len(res.Restore.Deltas)))
				if n := res.Restore.LeasesCreated; n > 0 {
					t.row(fmt.Sprintf("  %d leases granted after the full snapshot recreated with the missing-lease TTL", n))
				}
				t.row(fmt.Sprintf("  database %s before compaction and defragmentation, %s after; stored as %s, in %s",
					units.Bytes(res.DBSizeBefore), units.Bytes(res.DBSizeAfter), units.Bytes(res.Size), res.Duration.Round(time.Millisecond)))
				t.row("  the older objects now follow the retention policy (steward backup gc)")
			})
		},
	}
	sf.register(cmd.Flags())
	cmd.Flags().Uint32Var(&timeline, "timeline", 0, "the timeline to compact (default: the newest; see steward backup list)")
	cmd.Flags().Int64Var(&leaseTTL, "missing-lease-ttl", restore.DefaultMissingLeaseTTL, "give leases that keys refer to and no backup holds (granted after the full snapshot) this TTL in seconds, in the new snapshot")
	cmd.Flags().StringVar(&scratch, "scratch-dir", os.TempDir(), "directory for the scratch data dir (room for twice the database)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log etcd's messages")
	out.register(cmd)
	return cmd
}
