package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/backup/retention"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/seal"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/units"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newBackupCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Inspect and manage a backup store: list, save, verify, gc, compact",
	}
	cmd.AddCommand(newBackupListCommand(), newBackupSaveCommand(), newBackupVerifyCommand(), newBackupGCCommand(), newBackupCompactCommand())
	return cmd
}

// storeFlags open a backup store: its URL, its credentials, and the keys its backups are
// encrypted with. Only a command that writes backups sets create: the others refuse a store
// that does not exist (a mistyped --store) and create nothing.
type storeFlags struct {
	url, credentials, keys, keyID string
	create                        bool
}

func (sf *storeFlags) register(f *pflag.FlagSet) {
	f.StringVar(&sf.url, "store", "", "backup store URL (file://, s3://, gs://, azblob://)")
	registerCredentialsFlag(f, &sf.credentials, "store-credentials", "the store's credentials")
	registerKeyFlags(f, &sf.keys, &sf.keyID)
}

// registerCredentialsFlag adds the flag naming a directory of a store's credentials.
func registerCredentialsFlag(f *pflag.FlagSet, dir *string, name, what string) {
	f.StringVar(dir, name, "", what+", and no others: a directory (a mounted Secret) of files named like the variables, read again while the store is open: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (optional AWS_SESSION_TOKEN, AWS_REGION); AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN; GOOGLE_APPLICATION_CREDENTIALS holding the service-account key's JSON. Empty: the cloud's default credentials (environment, instance role, workload identity)")
}

func (sf *storeFlags) open(ctx context.Context) (*store.Store, error) {
	if sf.url == "" {
		return nil, fmt.Errorf("--store is required (e.g. file:///var/backups/etcd or s3://bucket/prefix)")
	}
	keys, err := loadKeys(sf.keys, sf.keyID)
	if err != nil {
		return nil, err
	}
	return store.Open(ctx, sf.url, store.Options{Keys: keys, CredentialsDir: sf.credentials, Create: sf.create})
}

// registerKeyFlags adds the flags naming the backups' encryption keys.
func registerKeyFlags(f *pflag.FlagSet, keys, keyID *string) {
	f.StringVar(keys, "encryption-keys", "", "encrypt backups (AES-256-GCM) with the keys at this path, and read them with these keys only: a directory with one key per file named by its ID (a mounted Secret), or a file of \"ID KEY\" lines; a key is 32 bytes in base64 or hex")
	f.StringVar(keyID, "encryption-key-id", "", "the ID of the key new backups are encrypted with (needed when --encryption-keys holds several)")
}

// loadKeys loads the keyring at path; none if path is empty.
func loadKeys(path, keyID string) (*seal.Keyring, error) {
	if path == "" {
		if keyID != "" {
			return nil, fmt.Errorf("--encryption-key-id %q without --encryption-keys: give the keys too", keyID)
		}
		return nil, nil
	}
	return seal.LoadKeyring(path, keyID)
}

// objectView is one backup object as printed by `backup list`.
type objectView struct {
	Timeline uint32    `json:"timeline"`
	Kind     string    `json:"kind"`
	Key      string    `json:"key"`
	FirstRev int64     `json:"firstRevision"`
	LastRev  int64     `json:"lastRevision"`
	Size     int64     `json:"size"`
	Created  time.Time `json:"created"`
}

// timelineView is one timeline as printed by `backup list`: the cluster whose history it
// holds (from its objects' headers), its revisions and times, and what it can restore.
type timelineView struct {
	Timeline  uint32         `json:"timeline"`
	ClusterID string         `json:"clusterID"`
	Revisions backup.Range   `json:"revisions"`
	From      time.Time      `json:"from"`
	To        time.Time      `json:"to"`
	Objects   int            `json:"objects"`
	Size      int64          `json:"size"`
	Coverage  []backup.Range `json:"coverage"`
	Disagrees string         `json:"disagrees,omitempty"`
}

type listView struct {
	Store     string         `json:"store"`
	Timelines []timelineView `json:"timelines"`
	Objects   []objectView   `json:"objects"`
	Issues    []string       `json:"issues"`
}

func newBackupListCommand() *cobra.Command {
	var (
		sf  storeFlags
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the timelines, full snapshots and deltas in a store, and the revisions they can restore",
		Long: `List shows every timeline in the store (one unbroken history of one cluster; a restore reads
one timeline: the newest unless --timeline is given), with its cluster, revisions, times and the
revisions it can restore, then every object.`,
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
			ix, err := backup.ReadIndex(ctx, s)
			if err != nil {
				return err
			}
			infos, err := backup.ObserveIndex(ctx, s, ix)
			if err != nil {
				return err
			}
			v := listView{Store: s.String(), Timelines: []timelineView{}, Issues: []string{}}
			for i, info := range infos {
				t := ix.Timelines[i]
				tv := timelineView{Timeline: info.Timeline, ClusterID: units.ID(info.ClusterID).String(), Coverage: t.Coverage(), Disagrees: info.Disagrees,
					Revisions: backup.Range{From: t.FirstRev(), To: t.NewestRevision()}, From: t.From.UTC(), To: t.To.UTC(), Objects: t.Objects(), Size: t.Bytes}
				if tv.Coverage == nil {
					tv.Coverage = []backup.Range{}
				}
				v.Timelines = append(v.Timelines, tv)
				v.Issues = append(v.Issues, listIssues(t)...)
			}
			if ix.Foreign > 0 {
				v.Issues = append(v.Issues, fmt.Sprintf("info: %d keys under v1/ are not backup objects (left alone), e.g. %s", ix.Foreign, ix.ForeignKeys[0]))
			}
			// The objects stream from the store to the output, page by page: a store holds
			// hundreds of thousands of deltas.
			return printList(cmd.OutOrStdout(), out.json(), v, func(each func(objectView) error) error {
				return backup.Scan(ctx, s, func(o backup.Object) error {
					created := o.Created
					if created.IsZero() {
						created = o.ModTime
					}
					return each(objectView{Timeline: o.Timeline, Kind: o.Kind.String(), Key: o.Key, FirstRev: o.FirstRev, LastRev: o.LastRev, Size: o.Size, Created: created.UTC()})
				}, nil)
			})
		},
	}
	sf.register(cmd.Flags())
	out.register(cmd)
	return cmd
}

// listIssues says what a timeline cannot restore: deltas without a full snapshot, revisions
// between the restorable ranges. `backup verify` reads the objects and says more.
func listIssues(t backup.TimelineIndex) []string {
	var out []string
	if len(t.Fulls) == 0 && t.Deltas > 0 {
		out = append(out, fmt.Sprintf("error: timeline %d: %d deltas (revisions %d-%d) but no full snapshot to apply them to: take a full snapshot",
			t.Timeline, t.Deltas, t.FirstDelta.FirstRev, t.FurthestDelta.LastRev))
	}
	cov := t.Coverage()
	for i := 1; i < len(cov); i++ {
		out = append(out, fmt.Sprintf("warning: timeline %d: revisions %d-%d cannot be restored to (no backup holds them, or a hole cuts them off from a full snapshot); revision %d and later can",
			t.Timeline, cov[i-1].To+1, cov[i].From-1, cov[i].From))
	}
	if n := len(cov); n > 0 && cov[n-1].To < t.NewestRevision() {
		out = append(out, fmt.Sprintf("error: timeline %d: deltas reach revision %d, but a hole after revision %d cuts them off from every full snapshot: take a full snapshot",
			t.Timeline, t.NewestRevision(), cov[n-1].To))
	}
	return out
}

// printList writes `backup list`'s view, then the objects objects gives, as they come:
// nothing holds them all. JSON: {"store", "timelines", "issues", "objects"}, the same shape
// as listView, every field always present.
func printList(w io.Writer, asJSON bool, v listView, objects func(each func(objectView) error) error) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	if asJSON {
		head, err := json.MarshalIndent(struct {
			Store     string         `json:"store"`
			Timelines []timelineView `json:"timelines"`
			Issues    []string       `json:"issues"`
		}{v.Store, v.Timelines, v.Issues}, "", "  ")
		if err != nil {
			return err
		}
		// Reopen the object to append "objects".
		bw.Write(head[:len(head)-2])
		bw.WriteString(",\n  \"objects\": [")
		n := 0
		err = objects(func(o objectView) error {
			b, err := json.MarshalIndent(o, "    ", "  ")
			if err != nil {
				return err
			}
			if n > 0 {
				bw.WriteString(",")
			}
			n++
			bw.WriteString("\n    ")
			_, err = bw.Write(b)
			return err
		})
		if err != nil {
			return err
		}
		if n > 0 {
			bw.WriteString("\n  ")
		}
		bw.WriteString("]\n}\n")
		return bw.Flush()
	}
	t := &table{tw: tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)}
	t.header("TIMELINE", "CLUSTER", "REVISIONS", "FROM", "TO", "OBJECTS", "SIZE", "RESTORABLE")
	for _, tv := range v.Timelines {
		cluster := tv.ClusterID
		if tv.Disagrees != "" {
			cluster += " (disagrees: " + tv.Disagrees + ")"
		}
		t.row(strconv.FormatUint(uint64(tv.Timeline), 10), cluster, tv.Revisions.String(), tv.From.Format(time.RFC3339), tv.To.Format(time.RFC3339),
			strconv.Itoa(tv.Objects), units.Bytes(tv.Size), backup.DescribeRanges(tv.Coverage))
	}
	for _, is := range v.Issues {
		t.row(is)
	}
	if err := t.tw.Flush(); err != nil {
		return err
	}
	// Fixed widths rather than a tabwriter, which would hold every row to align them.
	fmt.Fprintf(bw, "\n%-10s %-5s %-41s %9s %-20s %s\n", "TIMELINE", "KIND", "REVISIONS", "SIZE", "CREATED", "KEY")
	err := objects(func(o objectView) error {
		revs := strconv.FormatInt(o.FirstRev, 10)
		if o.Kind == backup.KindDelta.String() {
			revs += "-" + strconv.FormatInt(o.LastRev, 10)
		}
		_, err := fmt.Fprintf(bw, "%-10d %-5s %-41s %9s %-20s %s\n", o.Timeline, o.Kind, revs, units.Bytes(o.Size), o.Created.Format(time.RFC3339), o.Key)
		return err
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

func newBackupSaveCommand() *cobra.Command {
	sf := storeFlags{create: true}
	var (
		eps endpointsFlag
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "save",
		Short: "Take a full snapshot of one member now and store it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := out.check(); err != nil {
				return err
			}
			if len(eps.endpoints()) != 1 {
				return fmt.Errorf("--endpoints must name exactly one member (the snapshot is streamed from it), got %q", eps.list)
			}
			endpoint := eps.list
			s, err := sf.open(ctx)
			if err != nil {
				return err
			}
			defer s.Close()
			cli, err := eps.client()
			if err != nil {
				return err
			}
			defer cli.Close()
			m := snapshotter.Member{Client: cli, Endpoint: endpoint}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			p, err := snapshotter.Place(sctx, m, s)
			cancel()
			if err != nil {
				return fmt.Errorf("place a snapshot of member %s in %s: %w", endpoint, s, err)
			}
			progress := progressLines(cmd)
			if p.Placement.New {
				progress(p.Placement.Reason)
			}
			progress(fmt.Sprintf("snapshotting member %s (%s) into %s", endpoint, units.Bytes(p.Status.DbSize), s))
			bar := newProgressBar(cmd.ErrOrStderr(), "snapshot")
			res, err := snapshotter.Full(ctx, m, s, p.Timeline(), func(n int64) { bar.Update(n, p.Status.DbSize) })
			if err != nil {
				bar.Done("")
				return err
			}
			bar.Done(fmt.Sprintf("%s of database stored as %s", units.Bytes(res.DBSize), units.Bytes(res.Size)))
			return out.print(cmd.OutOrStdout(), res, func(t *table) {
				t.row(fmt.Sprintf("%s (timeline %d, revision %d)", res.Key, res.Timeline, res.Revision))
			})
		},
	}
	sf.register(cmd.Flags())
	eps.register(cmd, "client URL of the member to snapshot")
	out.register(cmd)
	return cmd
}

type verifyView struct {
	Store     string                  `json:"store"`
	OK        bool                    `json:"ok"`
	Objects   int                     `json:"objects"`
	Bytes     int64                   `json:"bytes"`
	Events    int64                   `json:"events"`
	Bad       []badView               `json:"bad"`
	Issues    []string                `json:"issues"`
	Timelines []backup.TimelineReport `json:"timelines"`
	// Drill is the restore drill's result (--restore), DrillError why it failed.
	Drill      *restore.DrillResult `json:"drill,omitempty"`
	DrillError string               `json:"drillError,omitempty"`
}

type badView struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

func newBackupVerifyCommand() *cobra.Command {
	var (
		sf             storeFlags
		scratch        string
		endpoints      endpointsFlag
		drill, verbose bool
		timeline       uint32
		out            outputFlag
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Read every object, check every checksum and, timeline by timeline, the chain; with --restore, restore it and prove the result; exit 2 if anything is wrong",
		Long: `Verify reads every object, checks every checksum and, timeline by timeline, that the
revisions follow each other.

With --restore it then runs a restore drill: it restores the newest revision of a timeline (the
newest, or --timeline) into a scratch data dir and proves the result exact. The restored
database must be at the chain's last revision, and its HashKV (etcd's hash of the key space) at
that revision is computed. With --endpoints, the first endpoint's member computes its own
HashKV at that revision and the two must be equal; the restored copy is first compacted to
that member's compact revision, since HashKV covers the revisions above it (the live cluster is
never compacted). The revision must still be above the member's compact revision: drill soon
after the last backup. The scratch dir needs room for the database and etcd's 64 MiB WAL; it
is removed on every exit path.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := out.check(); err != nil {
				return err
			}
			if !drill && (len(endpoints.endpoints()) > 0 || timeline != 0) {
				return errors.New("--endpoints and --timeline belong to the restore drill: add --restore")
			}
			s, err := sf.open(ctx)
			if err != nil {
				return err
			}
			defer s.Close()
			bar := newProgressBar(cmd.ErrOrStderr(), "verify")
			rep, err := backup.Verify(ctx, s, bar.Update)
			bar.Done("")
			if err != nil {
				return err
			}
			v := verifyView{Store: s.String(), OK: rep.OK(), Objects: rep.Objects, Bytes: rep.Bytes, Events: rep.Events,
				Timelines: append([]backup.TimelineReport{}, rep.Timelines...), Bad: []badView{}, Issues: []string{}}
			for _, b := range rep.Bad {
				v.Bad = append(v.Bad, badView{Key: b.Key, Error: b.Err.Error()})
			}
			for _, is := range rep.Issues {
				v.Issues = append(v.Issues, is.String())
			}
			var drillErr error
			switch {
			case drill && !v.OK:
				v.DrillError = "not run: the verification failed; restore drills need a chain that verifies"
			case drill:
				res, err := runDrill(cmd, s, timeline, endpoints, scratch, verbose)
				v.Drill, drillErr = &res, err
				if err != nil {
					v.DrillError = err.Error()
				}
			}
			if err := out.print(cmd.OutOrStdout(), v, func(t *table) {
				t.row(fmt.Sprintf("%d objects, %s, %d delta events read from %s", v.Objects, units.Bytes(v.Bytes), v.Events, v.Store))
				for _, b := range v.Bad {
					t.row("BAD " + b.Key + ": " + b.Error)
				}
				for _, is := range v.Issues {
					t.row(is)
				}
				for _, tl := range v.Timelines {
					t.row(fmt.Sprintf("timeline %d (cluster %x): restorable revisions %s", tl.Timeline, tl.ClusterID, backup.DescribeRanges(tl.Coverage)))
				}
				if v.OK {
					t.row("OK")
				}
				if v.DrillError != "" && drillErr == nil {
					t.row("drill " + v.DrillError)
				}
				if d := v.Drill; d != nil && drillErr == nil {
					t.row(fmt.Sprintf("drill: timeline %d restored to revision %d from %s and %d deltas in %s",
						d.Timeline, d.Revision, d.Restore.Full.Key, len(d.Restore.Deltas), d.Duration.Round(time.Millisecond)))
					if d.LiveEndpoint == "" {
						t.row(fmt.Sprintf("  HashKV at revision %d (compact revision %d): %d (give --endpoints to compare it with the live cluster)", d.Revision, d.CompactRevision, d.Hash))
					} else {
						t.row(fmt.Sprintf("  HashKV at revision %d (compact revision %d): %d, equal to live member %s's", d.Revision, d.CompactRevision, d.Hash, d.LiveEndpoint))
					}
				}
			}); err != nil {
				return err
			}
			if !v.OK {
				return &ExitError{Code: ExitProblems, Message: fmt.Sprintf("verification failed: %d damaged objects, %d chain issues", len(v.Bad), len(v.Issues))}
			}
			if drillErr != nil {
				if errors.Is(drillErr, restore.ErrDrillMismatch) || errors.Is(drillErr, backup.ErrCorrupt) || errors.Is(drillErr, restore.ErrMissingRevisions) {
					return &ExitError{Code: ExitProblems, Message: drillErr.Error()}
				}
				return drillErr
			}
			return nil
		},
	}
	sf.register(cmd.Flags())
	cmd.Flags().BoolVar(&drill, "restore", false, "also restore the newest revision into a scratch dir and prove it exact (a restore drill)")
	cmd.Flags().Uint32Var(&timeline, "timeline", 0, "the timeline to drill (default: the newest; see steward backup list)")
	endpoints.register(cmd, "client URLs of the live cluster: the first one's member HashKV is compared with the restored data's")
	cmd.Flags().StringVar(&scratch, "scratch-dir", os.TempDir(), "directory for the drill's scratch data dir (room for the database and 64 MiB)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log etcd's messages during the drill")
	out.register(cmd)
	return cmd
}

// runDrill runs verify's restore drill, with progress on stderr.
func runDrill(cmd *cobra.Command, s *store.Store, timeline uint32, endpoints endpointsFlag, scratch string, verbose bool) (restore.DrillResult, error) {
	ctx := cmd.Context()
	o := restore.DrillOptions{Store: s, Timeline: timeline, ScratchDir: scratch}
	if verbose {
		lg, err := newLogger("info")
		if err != nil {
			return restore.DrillResult{}, err
		}
		o.Logger = lg
	}
	if eps := endpoints.endpoints(); len(eps) > 0 {
		cli, err := endpoints.client()
		if err != nil {
			return restore.DrillResult{}, err
		}
		defer cli.Close()
		o.Live, o.LiveEndpoint = cli, eps[0]
	}
	prog := &phaseProgress{w: cmd.ErrOrStderr()}
	o.Progress = prog.update
	defer restore.HeapBound.Apply()()
	res, err := restore.Drill(ctx, o)
	prog.done()
	return res, err
}

func newBackupGCCommand() *cobra.Command {
	var (
		sf     storeFlags
		policy string
		dryRun bool
		out    outputFlag
	)
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Delete backups the retention policy does not keep (never the newest full snapshot or the deltas after it; nothing unless that snapshot reads back)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := out.check(); err != nil {
				return err
			}
			p, err := retention.ParsePolicy(policy)
			if err != nil {
				return err
			}
			s, err := sf.open(ctx)
			if err != nil {
				return err
			}
			defer s.Close()
			verb := "deleted"
			if dryRun {
				verb = "would delete"
			}
			// Deletions stream from the listing to the output: a first gc of a long-kept store
			// can delete hundreds of thousands of deltas.
			bw := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
			defer bw.Flush()
			asJSON := out.json()
			if asJSON {
				fmt.Fprintf(bw, "{\n  \"policy\": %q,\n  \"dryRun\": %t,\n  \"deleted\": [", p.String(), dryRun)
			}
			n := 0
			err = retention.Walk(ctx, s, p, time.Now(), 0, func(o backup.Object) error {
				if !dryRun {
					if err := s.Delete(ctx, o.Key); err != nil {
						return fmt.Errorf("retention: deleted %d objects, then: %w", n, err)
					}
				}
				if asJSON {
					if n > 0 {
						bw.WriteString(",")
					}
					fmt.Fprintf(bw, "\n    %q", o.Key)
				} else {
					fmt.Fprintf(bw, "%s  %s\n", verb, o.Key)
				}
				n++
				return nil
			})
			if asJSON {
				if n > 0 {
					bw.WriteString("\n  ")
				}
				fmt.Fprintf(bw, "],\n  \"count\": %d\n}\n", n)
			} else {
				fmt.Fprintf(bw, "%s %d objects (policy %s)\n", verb, n, p)
			}
			if ferr := bw.Flush(); err == nil {
				err = ferr
			}
			return err
		},
	}
	sf.register(cmd.Flags())
	cmd.Flags().StringVar(&policy, "policy", "", "retention policy: exponential, limit:N (the N newest full snapshots), age:N[h|d|w] (every point in time within the age, e.g. age:30d) or keep")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only say what would be deleted")
	out.register(cmd)
	return cmd
}
