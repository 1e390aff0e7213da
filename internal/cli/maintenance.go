package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/maintenance"
	"github.com/etcd-steward/steward/internal/units"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/resource"
)

// endpointsFlag is the --endpoints flag of the commands that talk to a live cluster, with
// --tls-dir for a cluster with TLS and --password-file for one with etcd authentication.
type endpointsFlag struct{ list, tlsDir, passwordFile string }

func (e *endpointsFlag) register(cmd *cobra.Command, usage string) {
	cmd.Flags().StringVar(&e.list, "endpoints", "", usage)
	cmd.Flags().StringVar(&e.tlsDir, "tls-dir", "", "client certificate directory (tls.crt, tls.key, ca.crt) for a cluster with TLS; 'steward local status' names it")
	cmd.Flags().StringVar(&e.passwordFile, "password-file", "", "file holding etcd's root password, for a cluster with etcd authentication; 'steward local status' names it")
}

func (e *endpointsFlag) endpoints() []string {
	if strings.TrimSpace(e.list) == "" {
		return nil
	}
	return strings.Split(e.list, ",")
}

func (e *endpointsFlag) dialer() etcdutil.Dialer {
	return etcdutil.Dialer{TLSDir: e.tlsDir, PasswordFile: e.passwordFile}
}

func (e *endpointsFlag) client() (*clientv3.Client, error) {
	if len(e.endpoints()) == 0 {
		return nil, errors.New("--endpoints is required: the client URLs of the cluster's members (`steward local status` lists them)")
	}
	cli, err := e.dialer().New(e.endpoints(), 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", e.list, err)
	}
	return cli, nil
}

func newDefragCommand() *cobra.Command {
	var (
		eps                    endpointsFlag
		all                    bool
		threshold              float64
		minReclaim             string
		memberTimeout, waitFor time.Duration
		out                    outputFlag
	)
	cmd := &cobra.Command{
		Use:   "defrag",
		Short: "Defragment the members worth it, one at a time, the leader last after its leadership moved",
		Long: `Defragments every member whose database is worth it (a fragmented share of at least
--threshold percent and at least --min-reclaim bytes to give back), or every member with --all.
Followers go one at a time; the leader goes last, after leadership has moved to the voter
furthest along, so writes never stall on a defragmenting leader. Before each member the
cluster must be fully healthy (every member answers, agrees on the leader and is caught up);
otherwise it waits up to --wait and stops, having done nothing more.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			policy, err := defragPolicy("--threshold", threshold, "--min-reclaim", minReclaim)
			if err != nil {
				return err
			}
			policy.All = all
			cli, err := eps.client()
			if err != nil {
				return err
			}
			defer cli.Close()
			o := maintenance.Options{Policy: policy,
				MemberTimeout: memberTimeout, WaitTimeout: waitFor, Progress: stepPrinter(cmd.ErrOrStderr())}
			res, err := maintenance.Defragment(cmd.Context(), cli, o)
			if perr := out.print(cmd.OutOrStdout(), res, func(t *table) { defragTable(t, res) }); perr != nil {
				return perr
			}
			return err
		},
	}
	eps.register(cmd, "client URLs of the cluster's members, comma-separated (required)")
	f := cmd.Flags()
	f.BoolVar(&all, "all", false, "defragment every member, worth it or not")
	f.Float64Var(&threshold, "threshold", 100*maintenance.DefaultPolicy.Threshold, "percentage of the database file that must be free pages")
	f.StringVar(&minReclaim, "min-reclaim", "100Mi", "the least a member must give back")
	f.DurationVar(&memberTimeout, "member-timeout", 5*time.Minute, "how long one member's defragmentation may take")
	f.DurationVar(&waitFor, "wait", time.Minute, "how long to wait for a fully healthy cluster before each member")
	out.register(cmd)
	return cmd
}

// defragPolicy builds a policy from a threshold in percent and a minimum size (a quantity
// such as 100Mi), naming the flag that is wrong.
func defragPolicy(thresholdFlag string, threshold float64, minFlag, minReclaim string) (maintenance.Policy, error) {
	if threshold < 0 || threshold > 100 {
		return maintenance.Policy{}, fmt.Errorf("%s %g: give a percentage from 0 to 100", thresholdFlag, threshold)
	}
	min, err := parseSize(minFlag, minReclaim)
	if err != nil {
		return maintenance.Policy{}, err
	}
	return maintenance.Policy{Threshold: threshold / 100, MinReclaim: min}, nil
}

// parseSize parses the size s given to flag ("100Mi", "1Gi", "0").
func parseSize(flag, s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() < 0 {
		return 0, fmt.Errorf("%s %q: give a size such as 100Mi or 1Gi", flag, s)
	}
	return q.Value(), nil
}

// stepPrinter prints each step of a maintenance round as it starts.
func stepPrinter(w io.Writer) func(maintenance.Step) {
	return func(s maintenance.Step) {
		switch s.Kind {
		case maintenance.StepDefrag:
			fmt.Fprintf(w, "defragmenting %s: %s\n", s.Member.Name, s.Reason)
		case maintenance.StepMoveLeader:
			fmt.Fprintf(w, "moving leadership from %s to %s: %s\n", s.Member.Name, s.To.Name, s.Reason)
		case maintenance.StepWait:
			fmt.Fprintf(w, "waiting: %s\n", s.Reason)
		}
	}
}

func defragTable(t *table, res maintenance.Result) {
	t.header("MEMBER", "BEFORE", "AFTER", "RECLAIMED", "DURATION", "NOTE")
	for _, m := range res.Members {
		note := ""
		switch {
		case m.MovedTo != "":
			note = "leader: leadership moved to " + m.MovedTo + " first"
		case m.WasLeader:
			note = "leader: defragmented in place"
		}
		t.row(m.Name, units.Bytes(m.Before), units.Bytes(m.After), units.Bytes(max(m.Before-m.After, 0)), m.Duration.Round(time.Millisecond).String(), note)
	}
	for _, name := range slices.Sorted(maps.Keys(res.Skipped)) {
		t.row(name, "-", "-", "-", "-", "skipped: "+res.Skipped[name])
	}
}

func newMoveLeaderCommand() *cobra.Command {
	var (
		eps endpointsFlag
		to  string
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "move-leader",
		Short: "Hand leadership to another voter (by default the one furthest along)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			cli, err := eps.client()
			if err != nil {
				return err
			}
			defer cli.Close()
			from, now, err := maintenance.MoveLeader(cmd.Context(), cli, to)
			if err != nil {
				return err
			}
			m := leaderMove{Before: from.Name, After: now.Name, Moved: from.ID != now.ID}
			return out.print(cmd.OutOrStdout(), m, func(t *table) {
				if !m.Moved {
					t.row(m.After + " already leads")
					return
				}
				t.row(fmt.Sprintf("leadership moved from %s to %s", m.Before, m.After))
			})
		},
	}
	eps.register(cmd, "client URLs of the cluster's members, comma-separated (required)")
	cmd.Flags().StringVar(&to, "to", "", "name or hex ID of the member to lead (default: the voter furthest along)")
	out.register(cmd)
	return cmd
}

func newCompactCommand() *cobra.Command {
	var (
		eps      endpointsFlag
		revision int64
		keep     int64
		out      outputFlag
	)
	cmd := &cobra.Command{
		Use:   "compact",
		Short: "Compact the key-value history up to a revision (keys and their current values stay)",
		Long: `Compacts the history before --revision, or all but the newest --keep revisions, and waits
until every member has applied it. Reads of older revisions fail afterwards; a
defragmentation then gives the space back. Backups are unaffected: they hold the history.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if (revision > 0) == cmd.Flags().Changed("keep") {
				return errors.New("give exactly one of --revision R (compact before R) or --keep N (keep the newest N revisions)")
			}
			if keep < 0 {
				return fmt.Errorf("--keep %d: give 0 or more revisions to keep", keep)
			}
			cli, err := eps.client()
			if err != nil {
				return err
			}
			defer cli.Close()
			rev, err := maintenance.Compact(cmd.Context(), cli, revision, keep)
			if err != nil {
				return err
			}
			res := struct {
				Revision int64 `json:"revision"`
			}{rev}
			return out.print(cmd.OutOrStdout(), res, func(t *table) { t.row("compacted at revision " + strconv.FormatInt(rev, 10)) })
		},
	}
	eps.register(cmd, "client URLs of the cluster's members, comma-separated (required)")
	cmd.Flags().Int64Var(&revision, "revision", 0, "compact the history before this revision")
	cmd.Flags().Int64Var(&keep, "keep", 0, "keep the newest N revisions of history")
	out.register(cmd)
	return cmd
}
