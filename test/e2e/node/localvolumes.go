package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// LocalClass is the StorageClass of volumes that live on one node, as local disks do: a
// volume is made on the node the scheduler picks for the claim's first pod
// (WaitForFirstConsumer), and its PersistentVolume's node affinity pins it there. A node
// powered off takes its volumes with it; a pod can only come back on its volume's node.
const LocalClass = "steward-local"

// localProvisioner is the name LocalClass's volumes are provisioned by.
const localProvisioner = "e2e.steward.dev/local"

// localVolumes is where each node's local volumes live: dir/local-volumes/NODE/CLAIM-UID.
func localVolumes(dir string) string { return filepath.Join(dir, "local-volumes") }

// ProvisionLocalVolumes serves LocalClass until ctx ends, as a local-volume provisioner does:
// for each claim of the class the scheduler has placed (the selected-node annotation), a
// directory on that node and a local PersistentVolume bound to the claim, pinned to the node;
// for each such volume released by its claim, the directory and the volume are deleted.
func ProvisionLocalVolumes(ctx context.Context, dir string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", AdminKubeconfig(dir))
	if err != nil {
		return err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for {
		if err := provisionOnce(ctx, c, dir); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "local volumes: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func provisionOnce(ctx context.Context, c kubernetes.Interface, dir string) error {
	pvcs, err := c.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, pvc := range pvcs.Items {
		node := pvc.Annotations["volume.kubernetes.io/selected-node"]
		if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != LocalClass || pvc.Spec.VolumeName != "" || node == "" || pvc.DeletionTimestamp != nil {
			continue
		}
		if err := provision(ctx, c, dir, &pvc, node); err != nil {
			return fmt.Errorf("claim %s/%s: %w", pvc.Namespace, pvc.Name, err)
		}
	}
	pvs, err := c.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, pv := range pvs.Items {
		if pv.Annotations["pv.kubernetes.io/provisioned-by"] != localProvisioner || pv.Status.Phase != corev1.VolumeReleased || pv.Spec.Local == nil {
			continue
		}
		if err := os.RemoveAll(pv.Spec.Local.Path); err != nil {
			return fmt.Errorf("volume %s: %w", pv.Name, err)
		}
		if err := c.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("volume %s: %w", pv.Name, err)
		}
	}
	return nil
}

func provision(ctx context.Context, c kubernetes.Interface, dir string, pvc *corev1.PersistentVolumeClaim, node string) error {
	path := filepath.Join(localVolumes(dir), node, string(pvc.UID))
	if err := os.MkdirAll(path, 0o2770); err != nil {
		return err
	}
	// The pods' fsGroup, as a CSI driver would apply it (see OwnVolumes).
	if err := os.Chown(path, VolumeOwner, VolumeOwner); err != nil {
		return err
	}
	if err := os.Chmod(path, 0o2770); err != nil {
		return err
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "local-" + string(pvc.UID), Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": localProvisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              LocalClass,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
	if _, err := c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
