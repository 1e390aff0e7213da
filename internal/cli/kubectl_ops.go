package cli

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
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

func newKubectlBackupCommand(f *kubeFlags) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "backup CLUSTER",
		Short: "Take a full snapshot of the cluster now (an EtcdBackup), and wait for it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			k, ec, err := f.connectTo(ctx, args[0])
			if err != nil {
				return err
			}
			if ec.Spec.Backup == nil {
				return fmt.Errorf("EtcdCluster %s/%s has no spec.backup: set a store first", ec.Namespace, ec.Name)
			}
			eb := &v1alpha1.EtcdBackup{Spec: v1alpha1.EtcdBackupSpec{Cluster: ec.Name}}
			return createAndWait(cmd, k, ec, eb, "EtcdBackup", wait, func() (bool, string, error) {
				s := eb.Status
				switch s.Phase {
				case v1alpha1.BackupCompleted:
					return true, fmt.Sprintf("completed: revision %d, %d bytes, %s", s.Revision, s.Size, s.Key), nil
				case v1alpha1.BackupFailed:
					return false, "", fmt.Errorf("EtcdBackup %s failed: %s", eb.Name, s.Message)
				}
				return false, strings.TrimSpace(orDash(s.Phase) + " " + s.Message), nil
			})
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Minute, "how long to wait for the snapshot (0: do not wait)")
	return cmd
}

func newKubectlRestoreCommand(f *kubeFlags) *cobra.Command {
	var (
		revision, timeline int64
		at                 string
		wait               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "restore CLUSTER [--to-revision R | --to-time T] [--timeline N]",
		Short: "Take the running cluster back to a revision or a time of its backups, in place (an EtcdRestore)",
		Long: `Take the running cluster back to a revision or a time of its own backups, in place: the
operator checks the target against the store, takes a full snapshot first, stops every member,
restores one and rejoins the others. Every write after the target is dropped. Without a target,
the newest revision the backups hold.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if revision != 0 && at != "" {
				return fmt.Errorf("--to-revision and --to-time name two targets: give one")
			}
			er := &v1alpha1.EtcdRestore{Spec: v1alpha1.EtcdRestoreSpec{Cluster: args[0]}}
			if revision != 0 {
				er.Spec.Revision = &revision
			}
			if timeline != 0 {
				er.Spec.Timeline = &timeline
			}
			if at != "" {
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return fmt.Errorf("--to-time %q: use RFC 3339, e.g. 2026-11-27T10:00:00Z", at)
				}
				er.Spec.Time = &metav1.Time{Time: t}
			}
			k, ec, err := f.connectTo(ctx, args[0])
			if err != nil {
				return err
			}
			return createAndWait(cmd, k, ec, er, "EtcdRestore", wait, func() (bool, string, error) {
				line := orDash(er.Status.Phase)
				if n := len(er.Status.Conditions); n > 0 {
					line += ": " + er.Status.Conditions[n-1].Message
				}
				switch er.Status.Phase {
				case v1alpha1.RestoreSucceeded:
					return true, line, nil
				case v1alpha1.RestoreFailed:
					return false, "", fmt.Errorf("EtcdRestore %s failed: %s", er.Name, line)
				}
				return false, line, nil
			})
		},
	}
	cmd.Flags().Int64Var(&revision, "to-revision", 0, "restore exactly this revision")
	cmd.Flags().StringVar(&at, "to-time", "", "restore the newest revision the backups prove existed at this time (RFC 3339)")
	cmd.Flags().Int64Var(&timeline, "timeline", 0, "the backup timeline to read (default: the cluster's current one)")
	cmd.Flags().DurationVar(&wait, "wait", 15*time.Minute, "how long to wait for the restore (0: do not wait)")
	return cmd
}

func newKubectlHibernateCommand(f *kubeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "hibernate CLUSTER on|off",
		Short: "Stop every member keeping its data (on), or resume the cluster on its data (off)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var value any
			switch args[1] {
			case "on":
				value = "true"
			case "off":
				value = nil // the annotation removed
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
			if value == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "EtcdCluster %s resumes on its data (%s removed)\n", ec.Name, v1alpha1.AnnotationHibernate)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "EtcdCluster %s hibernates: a full snapshot first, then every member stops with its data (%s=true)\n", ec.Name, v1alpha1.AnnotationHibernate)
			}
			return nil
		},
	}
}

func jsonValue(v any) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprintf("%q", v)
}

func newKubectlDestroyCommand(f *kubeFlags) *cobra.Command {
	var yes bool
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
			w := cmd.OutOrStdout()
			if !yes {
				return fmt.Errorf("this deletes member %s of cluster %s and its data for good (pod %s, volume %s): add --yes", pod.Name, clusterName, pod.Name, pvcName)
			}
			if hasPVC {
				if err := k.c.Delete(ctx, &pvc, client.Preconditions{UID: &pvc.UID}); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("deleting PersistentVolumeClaim %s/%s: %w", k.ns, pvcName, err)
				}
				fmt.Fprintf(w, "PersistentVolumeClaim %s deleted (it goes once its pod is gone)\n", pvcName)
			}
			if err := k.c.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting pod %s/%s: %w", k.ns, pod.Name, err)
			}
			fmt.Fprintf(w, "pod %s deleted: the operator replaces member %s with a new one (watch: kubectl steward status %s)\n", pod.Name, pod.Name, clusterName)
			return nil
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "delete without asking: the member's data is lost for good")
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
		container string
		tail      int64
		previous  bool
	)
	cmd := &cobra.Command{
		Use:   "logs MEMBER",
		Short: "Print a member's logs (its sidecar's by default, or etcd's with -c etcd)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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
	return cmd
}

func newKubectlReportCommand(f *kubeFlags) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "report CLUSTER [-f FILE]",
		Short: "Write a tarball of everything about a cluster a support request needs, secrets left out",
		Long: `Write a gzipped tarball of the cluster's objects (the EtcdCluster, its EtcdMembers with their
reports, EtcdBackups, EtcdRestores, StatefulSet, pods, volumes, ConfigMap, Services, Leases),
its Events and its members' logs. Secrets are listed by name and key only: no value is
written.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			k, ec, err := f.connectTo(ctx, args[0])
			if err != nil {
				return err
			}
			if file == "" {
				file = fmt.Sprintf("steward-report-%s-%s-%s.tar.gz", ec.Namespace, ec.Name, time.Now().UTC().Format("20060102T150405Z"))
			}
			out, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("the report file: %w", err)
			}
			if err := writeReport(ctx, k, ec, out); err != nil {
				out.Close()
				os.Remove(file)
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "report of %s/%s written to %s\n", ec.Namespace, ec.Name, file)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the tarball to write (default: steward-report-NS-NAME-TIME.tar.gz; never overwritten)")
	return cmd
}

// writeReport writes the cluster's report as a gzipped tarball to w.
func writeReport(ctx context.Context, k *kube, ec *v1alpha1.EtcdCluster, w io.Writer) error {
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
		return err
	}
	if err := add("etcdcluster.yaml", raw); err != nil {
		return err
	}
	var problems []string
	for _, l := range lists {
		if err := k.c.List(ctx, l.list, l.opts...); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", l.file, err))
			continue
		}
		raw, err := yaml.Marshal(withoutManagedFields(l.list))
		if err != nil {
			return err
		}
		if err := add(l.file, raw); err != nil {
			return err
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
		return err
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
				return err
			}
		}
	}
	if len(problems) > 0 {
		if err := add("problems.txt", []byte(strings.Join(problems, "\n")+"\n")); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
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
