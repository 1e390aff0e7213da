package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/units"
)

func newRestoreCommand() *cobra.Command {
	var (
		o                      restore.Options
		sf                     storeFlags
		toTime, initialCluster string
		rootPasswordFile       string
		peerURLs               []string
		clusterIDs             []string
		out                    outputFlag
		verbose                bool
	)
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Restore a member data dir from backups, to the newest revision or to a revision or time",
		Long: `Restore builds a new etcd data dir from a backup store, from one timeline (one cluster's
unbroken history; the newest by default, see 'steward backup list'): the newest full snapshot at
or below the target, then the delta events after it up to the target, each source revision applied as one
transaction on etcd's storage. The result is revision-exact: the revision and every key's value,
create/mod revision and version are what the source cluster had.

The data dir is built in <data-dir>.part, verified, then renamed into place; on any failure the
.part dir is removed and <data-dir> is left as it was. <data-dir> must not exist or be empty.

The restored data dir belongs to a new cluster made of the --initial-cluster members, as with
'etcdutl snapshot restore'. Start the member with the same --name, --initial-cluster,
--initial-advertise-peer-urls and --initial-cluster-token.

A timeline is chosen only if its newest full snapshot vouches for itself (with encryption: it
decrypts under the keys, header included; without: it is whole); others are passed over with a
warning. Where the store holds the timelines of several clusters (another cluster's, or this
cluster's before and after a restore gave it a new ID), a restore without --timeline is refused
naming them: give --cluster-id (the IDs of the cluster to restore) or --timeline.`,
		Example: `  steward restore --store s3://backups/prod --data-dir /var/lib/etcd/data --name m0 \
      --initial-advertise-peer-urls https://m0:2380 --initial-cluster m0=https://m0:2380
  steward restore --store file:///backups --data-dir ./m0.etcd --to-time 2024-06-01T12:00:00Z
  steward restore --store file:///backups --data-dir ./m0.etcd --to-revision 123456 --dry-run
  steward restore --store file:///backups --data-dir ./m0.etcd --timeline 1 --to-revision 123456
  steward restore --store file:///backups --data-dir ./m0.etcd --bump-revision 1000000 --mark-compacted`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := out.check(); err != nil {
				return err
			}
			if toTime != "" {
				t, err := time.Parse(time.RFC3339Nano, toTime)
				if err != nil {
					return fmt.Errorf("--to-time %q: use RFC 3339, e.g. 2024-06-01T12:00:00Z or 2024-06-01T14:00:00.5+02:00", toTime)
				}
				o.ToTime = t
			}
			for _, id := range clusterIDs {
				v, err := units.ParseID(id)
				if err != nil || v == 0 {
					return fmt.Errorf("--cluster-id %q: give an etcd cluster ID in hex, as `steward backup list` shows it", id)
				}
				o.ClusterIDs = append(o.ClusterIDs, uint64(v))
			}
			if o.DataDir == "" && !o.DryRun {
				return fmt.Errorf("--data-dir is required: the new member data dir (it must not exist or be empty)")
			}
			if rootPasswordFile != "" {
				pw, err := etcdutil.ReadPassword(rootPasswordFile)
				if err != nil {
					return fmt.Errorf("--root-password-file: %w", err)
				}
				o.RootPassword = pw
			}
			o.PeerURLs = peerURLs
			o.InitialCluster = initialCluster
			if o.InitialCluster == "" {
				// etcd's own default: this member alone.
				var parts []string
				for _, u := range peerURLs {
					parts = append(parts, o.Name+"="+u)
				}
				o.InitialCluster = strings.Join(parts, ",")
			}
			if verbose {
				lg, err := newLogger("info")
				if err != nil {
					return err
				}
				o.Logger = lg
			}
			s, err := sf.open(ctx)
			if err != nil {
				return err
			}
			defer s.Close()
			o.Store = s
			prog := &phaseProgress{w: cmd.ErrOrStderr()}
			o.Progress = prog.update
			defer restore.HeapBound.Apply()()
			res, err := restore.Restore(ctx, o)
			prog.done()
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res, func(t *table) { restoreTable(t, res) })
		},
	}
	f := cmd.Flags()
	sf.register(f)
	f.StringVar(&o.DataDir, "data-dir", "", "member data dir to create; must not exist or be empty")
	f.StringVar(&o.Name, "name", "default", "member name")
	f.StringVar(&initialCluster, "initial-cluster", "", "initial cluster configuration, name=peerURL,... (default: this member alone)")
	f.StringSliceVar(&peerURLs, "initial-advertise-peer-urls", []string{"http://localhost:2380"}, "this member's peer URLs")
	f.StringVar(&o.InitialClusterToken, "initial-cluster-token", "etcd-cluster", "initial cluster token of the restored cluster")
	f.Uint32Var(&o.Timeline, "timeline", 0, "restore from this timeline (see steward backup list; default: the newest, or with --to-time the one holding that time)")
	f.StringSliceVar(&clusterIDs, "cluster-id", nil, "without --timeline, read only the timelines of the cluster known by these etcd cluster IDs (hex, see steward backup list), never another cluster's on the same store (default: the store's timelines, refused if they are of several clusters)")
	f.Int64Var(&o.ToRevision, "to-revision", 0, "restore to exactly this revision of the timeline (default: its newest backed-up revision)")
	f.StringVar(&toTime, "to-time", "", "restore to the newest revision proven to exist at this RFC 3339 time (see docs/restore.md)")
	f.BoolVar(&o.AllowPartial, "allow-partial", false, "restore up to a hole or a damaged object instead of failing")
	f.Int64Var(&o.BumpRevision, "bump-revision", 0, "raise the restored revision by this much (needs --mark-compacted)")
	f.BoolVar(&o.MarkCompacted, "mark-compacted", false, "mark the bumped revision compacted, so watchers re-list (needs --bump-revision)")
	f.Int64Var(&o.MissingLeaseTTL, "missing-lease-ttl", restore.DefaultMissingLeaseTTL, "give leases that restored keys refer to and no backup holds (granted after the full snapshot) this TTL in seconds; 0: their keys never expire")
	// Accepted so that scripts written for the scratch file keep working.
	f.String("scratch-dir", "", "")
	_ = f.MarkDeprecated("scratch-dir", "it is ignored: the snapshot is written straight into the data dir")
	f.StringVar(&rootPasswordFile, "root-password-file", "", "give the restored root user the password in this file (for a cluster with etcd authentication: the backup may hold another root password)")
	f.BoolVar(&o.DryRun, "dry-run", false, "say what would be restored (objects, revisions, bytes) without writing")
	f.BoolVarP(&verbose, "verbose", "v", false, "log etcd's messages")
	cmd.MarkFlagsMutuallyExclusive("to-revision", "to-time")
	out.register(cmd)
	return cmd
}

func restoreTable(t *table, r restore.Result) {
	if r.DryRun {
		t.header("KIND", "REVISIONS", "SIZE", "KEY")
		t.row("full", strconv.FormatInt(r.Full.FirstRev, 10)+"+", units.Bytes(r.Full.Size), r.Full.Key)
		for _, d := range r.Deltas {
			t.row("delta", fmt.Sprintf("%d-%d", d.FirstRev, d.LastRev), units.Bytes(d.Size), d.Key)
		}
		t.row("")
		where := ""
		if r.DataDir != "" {
			where = " into " + r.DataDir
		}
		t.row(fmt.Sprintf("would restore revision %d of timeline %d%s, reading %d objects (%s)", r.Revision, r.Timeline, where, 1+len(r.Deltas), units.Bytes(r.Bytes)))
		t.row(fmt.Sprintf("the full snapshot's name gives a lower bound of its revision (%d); the restore reads the true one from its database", r.Full.FirstRev))
	} else {
		t.row(fmt.Sprintf("restored revision %d of timeline %d into %s", r.Revision, r.Timeline, r.DataDir))
		t.row(fmt.Sprintf("  full snapshot %s at revision %d", r.Full.Key, r.StartRevision))
		if len(r.Deltas) > 0 {
			t.row(fmt.Sprintf("  then %d revisions (%d events) from %d deltas; %d repeated events skipped", r.Revisions, r.Events, len(r.Deltas), r.Trimmed))
		}
		t.row(fmt.Sprintf("  %s read from the store, database %s, in %s", units.Bytes(r.Bytes), units.Bytes(r.DBSize), r.Duration.Round(time.Millisecond)))
		if r.BumpedRevision > 0 {
			t.row(fmt.Sprintf("  revision bumped to %d and marked compacted", r.BumpedRevision))
		}
		if r.LeasesCreated > 0 {
			t.row(fmt.Sprintf("  %d leases granted after the full snapshot recreated with the missing-lease TTL", r.LeasesCreated))
		}
	}
	for _, n := range r.PassedOver {
		t.row("WARNING: passed over " + n)
	}
	for _, k := range r.SkippedFulls {
		t.row(fmt.Sprintf("  skipped %s: its database is past the target", k))
	}
	if r.TargetTime != nil {
		t.row(fmt.Sprintf("  time %s: revision %d is the newest revision proven to exist then (by %s)", r.TargetTime.Format(time.RFC3339Nano), r.Target, r.TargetBasis))
		if r.TargetAfterEnd != "" {
			t.row("WARNING: --to-time " + r.TargetAfterEnd)
		}
	}
	if r.Partial {
		missing := ""
		if r.Missing != nil {
			missing = "revisions " + r.Missing.String() + " "
		}
		t.row(fmt.Sprintf("WARNING: partial restore: stopped at revision %d, short of %d: %scould not be restored: %s", r.Revision, r.Target, missing, r.Reason))
	}
}

// phaseProgress shows one progress bar per phase: bytes for transfers, revisions for the replay.
type phaseProgress struct {
	w     io.Writer
	mu    sync.Mutex
	phase restore.Phase
	bar   *progressBar
	last  restore.Progress
}

func (p *phaseProgress) update(pr restore.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr.Phase != p.phase {
		p.endPhase()
		p.phase, p.bar = pr.Phase, newProgressBar(p.w, string(pr.Phase))
	}
	p.last = pr
	switch pr.Phase {
	case restore.PhaseDownload, restore.PhaseUpload:
		p.bar.Update(pr.Done, pr.Total)
	case restore.PhaseReplay:
		p.bar.updateCount(pr.Done, pr.Total, "revisions")
	}
}

// endPhase closes the bar of the phase that ends with a one-line summary.
func (p *phaseProgress) endPhase() {
	if p.bar == nil {
		return
	}
	switch p.phase {
	case restore.PhaseDownload, restore.PhaseUpload:
		p.bar.Done(units.Bytes(p.last.Done))
	case restore.PhaseReplay:
		p.bar.Done(fmt.Sprintf("%d revisions", p.last.Done))
	case restore.PhaseSnapshot:
		p.bar.Done("member dir written by etcdutl")
	case restore.PhaseFinish:
		p.bar.Done("verified, synced and moved into place")
	case restore.PhaseCompact:
		p.bar.Done("compacted and defragmented")
	case restore.PhaseVerify:
		p.bar.Done("read back and verified")
	case restore.PhaseHash:
		p.bar.Done("hashed as etcd's HashKV")
	default:
		p.bar.Done("done")
	}
	p.bar = nil
}

func (p *phaseProgress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endPhase()
}

// updateCount shows done of total items (not bytes).
func (p *progressBar) updateCount(done, total int64, unit string) {
	if !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 100*time.Millisecond && done < total {
		return
	}
	p.last = time.Now()
	rate := float64(done) / max(time.Since(p.start).Seconds(), 1e-3)
	frac := 1.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	n := int(frac * 30)
	fmt.Fprintf(p.w, "\r%s [%s%s] %3.0f%% %d/%d %s %.0f/s ", p.label, strings.Repeat("=", n), strings.Repeat(" ", 30-n),
		frac*100, done, total, unit, rate)
}
