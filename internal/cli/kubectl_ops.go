package cli

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/livefigures"
	"github.com/etcd-steward/steward/internal/units"
	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// backupResult is what `kubectl steward backup` prints: the EtcdBackup as it stood when the
// wait ended (with --wait 0, just created).
type backupResult struct {
	Cluster  string         `json:"cluster"`
	Backup   string         `json:"backup"`
	Phase    string         `json:"phase,omitempty"`
	Revision int64          `json:"revision,omitempty"`
	Size     int64          `json:"size,omitempty"`
	Key      string         `json:"key,omitempty"`
	Took     units.Duration `json:"took,omitzero"`
}

func newKubectlBackupCommand(f *kubeFlags) *cobra.Command {
	var (
		wait time.Duration
		out  outputFlag
	)
	cmd := &cobra.Command{
		Use:   "backup CLUSTER",
		Short: "Take a full snapshot of the cluster now (an EtcdBackup), and wait for it",
		Long: `Take a full snapshot of the cluster now (an EtcdBackup), and wait for it: its progress goes to
stderr, the snapshot's revision, size and object to stdout once it is done.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			ctx := cmd.Context()
			k, ec, err := f.connectTo(ctx, args[0])
			if err != nil {
				return err
			}
			if ec.Spec.Backup == nil {
				return fmt.Errorf("EtcdCluster %s/%s has no spec.backup: set a store first", ec.Namespace, ec.Name)
			}
			eb := &v1alpha1.EtcdBackup{Spec: v1alpha1.EtcdBackupSpec{Cluster: ec.Name}}
			err = createAndWait(cmd, k, ec, eb, "EtcdBackup", wait, func() (bool, string, error) {
				s := eb.Status
				switch s.Phase {
				case v1alpha1.BackupCompleted:
					return true, "completed", nil
				case v1alpha1.BackupFailed:
					return false, "", fmt.Errorf("EtcdBackup %s failed: %s", eb.Name, s.Message)
				}
				return false, strings.TrimSpace(orDash(s.Phase) + " " + s.Message), nil
			})
			if err != nil {
				return err
			}
			s := eb.Status
			res := backupResult{Cluster: ec.Name, Backup: eb.Name, Phase: s.Phase, Revision: s.Revision, Size: s.Size, Key: s.Key}
			if s.StartTime != nil && s.EndTime != nil {
				res.Took = units.Duration(s.EndTime.Sub(s.StartTime.Time))
			}
			return out.print(cmd.OutOrStdout(), res, func(t *table) {
				t.header("CLUSTER", "BACKUP", "PHASE", "REVISION", "SIZE", "TOOK", "KEY")
				t.row(res.Cluster, res.Backup, orDash(res.Phase), orDashIfZero(res.Revision, strconv.FormatInt(res.Revision, 10)),
					orDashIfZero(res.Size, units.Bytes(res.Size)), orDashIfZero(res.Took, res.Took.Round(time.Millisecond).String()), orDash(res.Key))
			})
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Minute, "how long to wait for the snapshot (0: do not wait)")
	out.register(cmd)
	return cmd
}

// restoreResult is what `kubectl steward restore` prints: the EtcdRestore as it stood when
// the wait ended (with --wait 0, just created).
type restoreResult struct {
	Cluster  string `json:"cluster"`
	Restore  string `json:"restore"`
	Phase    string `json:"phase,omitempty"`
	Timeline int64  `json:"timeline,omitempty"`
	// Target is the revision the operator resolved the request to; Restored the one the
	// cluster holds after.
	Target   int64  `json:"targetRevision,omitempty"`
	Restored int64  `json:"restoredRevision,omitempty"`
	Message  string `json:"message,omitempty"`
}

func newKubectlRestoreCommand(f *kubeFlags) *cobra.Command {
	var (
		revision, timeline int64
		at, into           string
		dryRun             bool
		wait               time.Duration
		out                outputFlag
	)
	cmd := &cobra.Command{
		Use:   "restore CLUSTER [--to-revision R | --to-time T] [--timeline N] [--into NEW] [--dry-run]",
		Short: "Take the running cluster back to a revision or a time of its backups, in place (an EtcdRestore) or into a new cluster",
		Long: `Take the running cluster back to a revision or a time of its own backups, in place: the
operator checks the target against the store, takes a full snapshot first, stops every member,
restores one and rejoins the others. Every write after the target is dropped. Without a target,
the newest revision the backups hold. Its phases go to stderr, the outcome to stdout.

With --into NEW, the cluster is left as it is: a new EtcdCluster NEW, of the same spec but
without backups of its own (give it a store of its own), starts from the target
(spec.bootstrap.restore), reading the cluster's store with its credentials Secret.

With --dry-run, nothing is created: it prints the target against the recoverable window the
cluster's status records, and, in place, how many revisions would be dropped, counted from the
cluster's live revision (the members' reports; the status's, as of its last write, where they
cannot be read); it exits non-zero when the target is before the window. The window's end lags
the backups (the status writes it at most once an hour on a cluster at rest): a target past it
is only noted, and the operator checks it against the store.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			ctx := cmd.Context()
			if revision != 0 && at != "" {
				return fmt.Errorf("--to-revision and --to-time name two targets: give one")
			}
			var target restoreTarget
			if revision != 0 {
				target.Revision = &revision
			}
			if timeline != 0 {
				target.Timeline = &timeline
			}
			if at != "" {
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return fmt.Errorf("--to-time %q: use RFC 3339, e.g. 2026-11-27T10:00:00Z", at)
				}
				target.Time = &metav1.Time{Time: t}
			}
			k, ec, err := f.connectTo(ctx, args[0])
			if err != nil {
				return err
			}
			if dryRun {
				f, err := livefigures.Read(ctx, k.c, ec)
				if err != nil {
					return err
				}
				plan, err := planRestore(ec, f, target, into, time.Now())
				if perr := out.print(cmd.OutOrStdout(), plan, func(t *table) {
					t.header("CLUSTER", "INTO", "REVISION", "WINDOW", "TARGET", "DROPPED", "VERDICT")
					t.row(plan.Cluster, orDash(plan.Into), strconv.FormatInt(plan.Revision, 10), orDash(plan.Window), plan.Target,
						orDashIfZero(plan.Dropped, strconv.FormatInt(plan.Dropped, 10)), plan.Verdict)
				}); perr != nil {
					return perr
				}
				return err
			}
			if into != "" {
				return restoreInto(cmd, k, ec, target, into, wait, out)
			}
			er := &v1alpha1.EtcdRestore{Spec: v1alpha1.EtcdRestoreSpec{Cluster: args[0], Revision: target.Revision, Time: target.Time, Timeline: target.Timeline}}
			message := func() string {
				if n := len(er.Status.Conditions); n > 0 {
					return er.Status.Conditions[n-1].Message
				}
				return ""
			}
			err = createAndWait(cmd, k, ec, er, "EtcdRestore", wait, func() (bool, string, error) {
				line := orDash(er.Status.Phase)
				if m := message(); m != "" {
					line += ": " + m
				}
				switch er.Status.Phase {
				case v1alpha1.RestoreSucceeded:
					return true, line, nil
				case v1alpha1.RestoreFailed:
					return false, "", fmt.Errorf("EtcdRestore %s failed: %s", er.Name, line)
				}
				return false, line, nil
			})
			if err != nil {
				return err
			}
			res := restoreResult{Cluster: ec.Name, Restore: er.Name, Phase: er.Status.Phase, Restored: er.Status.RestoredRevision, Message: message()}
			if tg := er.Status.Target; tg != nil {
				res.Target, res.Timeline = tg.Revision, tg.Timeline
			}
			return out.print(cmd.OutOrStdout(), res, func(t *table) {
				t.header("CLUSTER", "RESTORE", "PHASE", "TIMELINE", "TARGET", "RESTORED", "MESSAGE")
				t.row(res.Cluster, res.Restore, orDash(res.Phase), orDashIfZero(res.Timeline, strconv.FormatInt(res.Timeline, 10)),
					orDashIfZero(res.Target, strconv.FormatInt(res.Target, 10)), orDashIfZero(res.Restored, strconv.FormatInt(res.Restored, 10)), orDash(res.Message))
			})
		},
	}
	cmd.Flags().Int64Var(&revision, "to-revision", 0, "restore exactly this revision")
	cmd.Flags().StringVar(&at, "to-time", "", "restore the newest revision the backups prove existed at this time (RFC 3339)")
	cmd.Flags().Int64Var(&timeline, "timeline", 0, "the backup timeline to read (default: the cluster's current one)")
	cmd.Flags().DurationVar(&wait, "wait", 15*time.Minute, "how long to wait for the restore (0: do not wait)")
	cmd.Flags().StringVar(&into, "into", "", "restore into a new EtcdCluster of this name, leaving the cluster as it is")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "create nothing: print the target against the recoverable window, and what would be dropped")
	out.register(cmd)
	return cmd
}

// hibernation is what `kubectl steward hibernate` prints.
type hibernation struct {
	Cluster   string `json:"cluster"`
	Hibernate bool   `json:"hibernate"`
	// Next is what the operator does now.
	Next string `json:"next"`
}

func newKubectlHibernateCommand(f *kubeFlags) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:   "hibernate CLUSTER on|off",
		Short: "Stop every member keeping its data (on), or resume the cluster on its data (off)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			res := hibernation{Cluster: args[0]}
			var value any
			switch args[1] {
			case "on":
				value = "true"
				res.Hibernate = true
				res.Next = fmt.Sprintf("a full snapshot first, then every member stops with its data (%s=true)", v1alpha1.AnnotationHibernate)
			case "off":
				value = nil // the annotation removed
				res.Next = fmt.Sprintf("the members start on their data (%s removed)", v1alpha1.AnnotationHibernate)
			default:
				return fmt.Errorf("hibernate %s %q: say on or off", args[0], args[1])
			}
			ctx := cmd.Context()
			k, ec, err := f.connectTo(ctx, args[0])
			if err != nil {
				return err
			}
			raw := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:%s}}}`, ec.ResourceVersion, v1alpha1.AnnotationHibernate, jsonValue(value))
			if err := k.c.Patch(ctx, ec, client.RawPatch(types.MergePatchType, []byte(raw))); err != nil {
				if apierrors.IsConflict(err) {
					return fmt.Errorf("EtcdCluster %s/%s changed meanwhile: run it again", ec.Namespace, ec.Name)
				}
				return fmt.Errorf("annotating EtcdCluster %s/%s: %w", ec.Namespace, ec.Name, err)
			}
			return out.print(cmd.OutOrStdout(), res, func(t *table) {
				t.header("CLUSTER", "HIBERNATE", "NEXT")
				t.row(res.Cluster, args[1], res.Next)
			})
		},
	}
	out.register(cmd)
	return cmd
}

func jsonValue(v any) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprintf("%q", v)
}

// destroyedMember is what `kubectl steward destroy` prints.
type destroyedMember struct {
	Cluster string `json:"cluster"`
	Member  string `json:"member"`
	// ID is the member's etcd ID (hex), as the cluster's status records it; absent when it
	// records none.
	ID string `json:"id,omitempty"`
	// Volume is the deleted PersistentVolumeClaim; absent when the member had none.
	Volume string `json:"volume,omitempty"`
}

func newKubectlDestroyCommand(f *kubeFlags) *cobra.Command {
	var (
		yes bool
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "destroy MEMBER --yes",
		Short: "Delete a member's pod and volume, so that the operator replaces it with a new member",
		Long: `Delete a member's pod and its volume (PersistentVolumeClaim): the operator then adds a new
member in its place, as a learner that catches up from the others before it votes. Its data is
gone for good: do this to a member whose disk is bad, never to more members than the cluster
can lose at once (one of three, two of five). Only a pod of a Steward cluster is touched, and
only the pod and volume read at the start (their UIDs are checked on delete).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			ctx := cmd.Context()
			k, err := f.connect()
			if err != nil {
				return err
			}
			pod, clusterName, err := k.memberPod(ctx, args[0])
			if err != nil {
				return err
			}
			var pvc corev1.PersistentVolumeClaim
			pvcName := "data-" + pod.Name
			hasPVC := true
			if err := k.c.Get(ctx, types.NamespacedName{Namespace: k.ns, Name: pvcName}, &pvc); apierrors.IsNotFound(err) {
				hasPVC = false
			} else if err != nil {
				return fmt.Errorf("reading PersistentVolumeClaim %s/%s: %w", k.ns, pvcName, err)
			} else if pvc.Labels[v1alpha1.LabelCluster] != clusterName {
				return fmt.Errorf("PersistentVolumeClaim %s/%s is not of cluster %s: nothing done", k.ns, pvcName, clusterName)
			}
			if !yes {
				return fmt.Errorf("this deletes member %s of cluster %s and its data for good (pod %s, volume %s): add --yes", pod.Name, clusterName, pod.Name, pvcName)
			}
			res := destroyedMember{Cluster: clusterName, Member: pod.Name}
			// The ID only informs: a cluster that cannot be read (gone, or not readable with
			// the user's rights) does not stop the member's replacement.
			if ec, err := k.cluster(ctx, clusterName); err == nil {
				for _, m := range ec.Status.Members {
					if m.Name == pod.Name {
						res.ID = m.ID
					}
				}
			}
			if hasPVC {
				if err := k.c.Delete(ctx, &pvc, client.Preconditions{UID: &pvc.UID}); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("deleting PersistentVolumeClaim %s/%s: %w", k.ns, pvcName, err)
				}
				res.Volume = pvcName
			}
			if err := k.c.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting pod %s/%s: %w", k.ns, pod.Name, err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "the operator replaces member %s with a new one (watch: kubectl steward status %s)\n", pod.Name, clusterName)
			return out.print(cmd.OutOrStdout(), res, func(t *table) {
				t.header("CLUSTER", "MEMBER", "ID", "VOLUME")
				t.row(res.Cluster, res.Member, orDash(res.ID), orDash(res.Volume))
			})
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "delete without asking: the member's data is lost for good")
	out.register(cmd)
	return cmd
}

// memberPod reads pod name, fresh, and the cluster it is a member of: only a pod of a Steward
// cluster (its label, and its StatefulSet as controller) is one.
func (k *kube) memberPod(ctx context.Context, name string) (*corev1.Pod, string, error) {
	var pod corev1.Pod
	if err := k.c.Get(ctx, types.NamespacedName{Namespace: k.ns, Name: name}, &pod); err != nil {
		return nil, "", fmt.Errorf("reading pod %s/%s: %w", k.ns, name, err)
	}
	clusterName := pod.Labels[v1alpha1.LabelCluster]
	owner := metav1.GetControllerOf(&pod)
	if clusterName == "" || owner == nil || owner.Kind != "StatefulSet" || owner.Name != clusterName {
		return nil, "", fmt.Errorf("pod %s/%s is not a member of a Steward cluster: nothing done", k.ns, pod.Name)
	}
	return &pod, clusterName, nil
}

func newKubectlLogsCommand(f *kubeFlags) *cobra.Command {
	var (
		container, output string
		tail              int64
		previous          bool
	)
	cmd := &cobra.Command{
		Use:   "logs MEMBER",
		Short: "Print a member's logs (its sidecar's by default, or etcd's with -c etcd)",
		Long: `Print a member's logs (its sidecar's by default, or etcd's with -c etcd) as the container
wrote them: both write one JSON object a line already, which jq reads as it is. There is no
-o: a line the container did not write as JSON (a crash's stack trace) is printed as it is too.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" {
				return fmt.Errorf("logs -o %s: logs prints the container's lines as it wrote them, each a JSON object already (pipe them to jq); it takes no -o", output)
			}
			if container != "sidecar" && container != "etcd" {
				return fmt.Errorf("-c %q: a member's containers are sidecar and etcd", container)
			}
			k, err := f.connect()
			if err != nil {
				return err
			}
			opts := &corev1.PodLogOptions{Container: container, Previous: previous}
			if tail >= 0 {
				opts.TailLines = &tail
			}
			rc, err := k.core.CoreV1().Pods(k.ns).GetLogs(args[0], opts).Stream(cmd.Context())
			if err != nil {
				return fmt.Errorf("the %s logs of %s/%s: %w", container, k.ns, args[0], err)
			}
			defer rc.Close()
			_, err = io.Copy(cmd.OutOrStdout(), rc)
			return err
		},
	}
	cmd.Flags().StringVarP(&container, "container", "c", "sidecar", "sidecar or etcd")
	cmd.Flags().Int64Var(&tail, "tail", -1, "only the last N lines (-1: all)")
	cmd.Flags().BoolVar(&previous, "previous", false, "the logs of the container's previous run")
	// -o as the other verbs take it, only to refuse it clearly.
	cmd.Flags().StringVarP(&output, "output", "o", "", "not taken: the lines are printed as the container wrote them")
	_ = cmd.Flags().MarkHidden("output")
	return cmd
}

// reportFile is what `kubectl steward report` prints.
type reportFile struct {
	Namespace string `json:"namespace"`
	Cluster   string `json:"cluster"`
	File      string `json:"file"`
	// Problems are what could not be read, also in the tarball's problems.txt.
	Problems []string `json:"problems,omitempty"`
}

func newKubectlReportCommand(f *kubeFlags) *cobra.Command {
	var (
		file string
		out  outputFlag
	)
	cmd := &cobra.Command{
		Use:   "report CLUSTER [-f FILE]",
		Short: "Write a tarball of everything about a cluster a support request needs, secrets left out",
		Long: `Write a gzipped tarball of the cluster's objects (the EtcdCluster, its EtcdMembers with their
reports, EtcdBackups, EtcdRestores, StatefulSet, pods, volumes, ConfigMap, Services, Leases),
its Events and its members' logs. Secrets are listed by name and key only: no value is
written.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			ctx := cmd.Context()
			k, ec, err := f.connectTo(ctx, args[0])
			if err != nil {
				return err
			}
			if file == "" {
				file = fmt.Sprintf("steward-report-%s-%s-%s.tar.gz", ec.Namespace, ec.Name, time.Now().UTC().Format("20060102T150405Z"))
			}
			w, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("the report file: %w", err)
			}
			problems, err := writeReport(ctx, k, ec, w)
			if err != nil {
				w.Close()
				os.Remove(file)
				return err
			}
			if err := w.Close(); err != nil {
				return err
			}
			res := reportFile{Namespace: ec.Namespace, Cluster: ec.Name, File: file, Problems: problems}
			return out.print(cmd.OutOrStdout(), res, func(t *table) {
				t.header("NAMESPACE", "CLUSTER", "FILE", "NOT READ")
				t.row(res.Namespace, res.Cluster, res.File, orDashIfZero(len(res.Problems), strings.Join(res.Problems, "; ")))
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the tarball to write (default: steward-report-NS-NAME-TIME.tar.gz; never overwritten)")
	out.register(cmd)
	return cmd
}

// writeReport writes the cluster's report as a gzipped tarball to w, and returns what it could
// not read (problems.txt of the tarball).
func writeReport(ctx context.Context, k *kube, ec *v1alpha1.EtcdCluster, w io.Writer) (problems []string, err error) {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(data)), ModTime: time.Now()}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	mine := client.MatchingLabels{v1alpha1.LabelCluster: ec.Name}
	pods := &corev1.PodList{} // listed with the objects, read again for the logs
	in := client.InNamespace(ec.Namespace)
	lists := []struct {
		file string
		list client.ObjectList
		opts []client.ListOption
	}{
		{"etcdmembers.yaml", &v1alpha1.EtcdMemberList{}, []client.ListOption{in, mine}},
		{"etcdbackups.yaml", &v1alpha1.EtcdBackupList{}, []client.ListOption{in}},
		{"etcdrestores.yaml", &v1alpha1.EtcdRestoreList{}, []client.ListOption{in}},
		{"statefulsets.yaml", &appsv1.StatefulSetList{}, []client.ListOption{in, mine}},
		{"pods.yaml", pods, []client.ListOption{in, mine}},
		{"persistentvolumeclaims.yaml", &corev1.PersistentVolumeClaimList{}, []client.ListOption{in, mine}},
		{"configmaps.yaml", &corev1.ConfigMapList{}, []client.ListOption{in, mine}},
		{"services.yaml", &corev1.ServiceList{}, []client.ListOption{in, mine}},
		{"leases.yaml", &coordinationv1.LeaseList{}, []client.ListOption{in, mine}},
		{"events.yaml", &corev1.EventList{}, []client.ListOption{in}},
	}
	ec = ec.DeepCopy()
	ec.ManagedFields = nil
	raw, err := yaml.Marshal(ec)
	if err != nil {
		return nil, err
	}
	if err := add("etcdcluster.yaml", raw); err != nil {
		return nil, err
	}
	for _, l := range lists {
		if err := k.c.List(ctx, l.list, l.opts...); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", l.file, err))
			continue
		}
		raw, err := yaml.Marshal(withoutManagedFields(l.list))
		if err != nil {
			return nil, err
		}
		if err := add(l.file, raw); err != nil {
			return nil, err
		}
	}
	// Secrets: names and keys only.
	var secrets corev1.SecretList
	if err := k.c.List(ctx, &secrets, in); err != nil {
		problems = append(problems, fmt.Sprintf("secrets: %v", err))
	}
	var names []string
	for _, s := range secrets.Items {
		if s.Labels[v1alpha1.LabelCluster] != ec.Name && !strings.HasPrefix(s.Name, ec.Name+"-") {
			continue
		}
		var keys []string
		for key := range s.Data {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		names = append(names, fmt.Sprintf("%s: keys %s (values not written)", s.Name, strings.Join(keys, ", ")))
	}
	if err := add("secrets.txt", []byte(strings.Join(names, "\n")+"\n")); err != nil {
		return nil, err
	}
	tail := int64(2000)
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			data, err := k.core.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: &tail}).DoRaw(ctx)
			if err != nil {
				problems = append(problems, fmt.Sprintf("logs of %s/%s: %v", p.Name, c.Name, err))
				continue
			}
			if err := add(fmt.Sprintf("logs/%s-%s.log", p.Name, c.Name), data); err != nil {
				return nil, err
			}
		}
	}
	if len(problems) > 0 {
		if err := add("problems.txt", []byte(strings.Join(problems, "\n")+"\n")); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return problems, gz.Close()
}

// withoutManagedFields drops the list's objects' managed fields, which say nothing about the
// cluster and triple the report's size.
func withoutManagedFields(list client.ObjectList) client.ObjectList {
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		if m, ok := o.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		return nil
	})
	return list
}
