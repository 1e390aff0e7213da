package operator

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestBackupKeysSecretChecked: spec.backup.encryption's Secret is checked before its pods
// could need it: missing, a key that is not 32 bytes, several keys and none named active, and
// an active key the Secret lacks each give one error naming the Secret (and the key ID, never
// its value) in status.lastErrors and a Warning Event; a good Secret clears it, and only the
// sidecar mounts it.
func TestBackupKeysSecretChecked(t *testing.T) {
	t.Parallel() // its own namespace
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "enc", 1)
	ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://backups/enc",
		Encryption: &v1alpha1.BackupEncryption{KeysSecret: corev1.LocalObjectReference{Name: "enc-keys"}}}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	lastError := func(want string) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, "an error saying "+want, func() error {
			ec := getCluster(t, ns, "enc")
			for _, e := range ec.Status.LastErrors {
				if e.Code == "ERR_BACKUP_SECRET" && strings.Contains(e.Description, want) && strings.Contains(e.Description, "enc-keys") {
					return nil
				}
			}
			return fmt.Errorf("lastErrors %+v", ec.Status.LastErrors)
		})
	}
	lastError("does not exist")

	short := base64.StdEncoding.EncodeToString([]byte("sixteen bytes!!!"))
	good := func(b byte) []byte {
		return []byte(base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(b), 32))))
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "enc-keys"}, Data: map[string][]byte{"k1": []byte(short)}}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	lastError(`key "k1": 16 bytes`)
	secret.Data = map[string][]byte{"k1": good('a'), "k2": good('b')}
	if err := k8s.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	lastError("name the one")
	updateCluster(t, ns, "enc", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Backup.Encryption.ActiveKeyID = "k3" })
	lastError(`no key with ID "k3"`)
	updateCluster(t, ns, "enc", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Backup.Encryption.ActiveKeyID = "k2" })
	testutil.Eventually(t, 20*time.Second, "no error once the Secret and the active key are right", func() error {
		if errs := getCluster(t, ns, "enc").Status.LastErrors; slices.ContainsFunc(errs, func(e v1alpha1.LastError) bool { return e.Code == "ERR_BACKUP_SECRET" }) {
			return fmt.Errorf("lastErrors %+v", errs)
		}
		return nil
	})
	if err := findEvent(ns, "SecretMissing"); err != nil {
		t.Error(err)
	}
	out, err := kubectl(t, "get", "events", "-n", ns, "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, short) || strings.Contains(out, string(good('a'))) {
		t.Error("an Event shows a key's value")
	}

	var sts appsv1.StatefulSet
	testutil.Eventually(t, 20*time.Second, "StatefulSet enc with the active key", func() error {
		if err := get(t, ns, "enc", &sts); err != nil {
			return err
		}
		for _, c := range sts.Spec.Template.Spec.Containers {
			args := strings.Join(c.Command, " ")
			mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == BackupKeysMount })
			if want := c.Name == "sidecar"; mounted != want || strings.Contains(args, "--encryption-key-id k2") != want {
				return fmt.Errorf("container %s: keys mounted %t, command %s", c.Name, mounted, args)
			}
		}
		return nil
	})
}
