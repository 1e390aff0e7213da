package operator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The status as tools read it (kstatus, Argo CD, Flux): the conditions carry the generation
// they were computed for; status.observedGeneration reaches a new generation only once it is
// carried out: everything synced, and the StatefulSet controller has seen the new template (so
// the rolling update is known); a failing sync keeps Progressing True, naming the failed step;
// a cluster that never formed is Bootstrapping, not QuorumLost.
func TestStatusFollowsTheGeneration(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	if err := k8s.Create(ctx, newCluster(ns, "gen", 3)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "Ready False, Bootstrapping", func() error {
		c := apimeta.FindStatusCondition(getCluster(t, ns, "gen").Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonBootstrapping {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
	ec := waitReady(t, ns, "gen", 3)
	testutil.Eventually(t, 10*time.Second, "observedGeneration of the first generation", func() error {
		members(t, ns, "gen", all)
		if ec = getCluster(t, ns, "gen"); ec.Status.ObservedGeneration != ec.Generation {
			return fmt.Errorf("observedGeneration %d of generation %d", ec.Status.ObservedGeneration, ec.Generation)
		}
		return nil
	})

	// A new pod template: the operator writes it at once, but until the StatefulSet controller
	// (played by members) has seen it, the generation is not accounted for.
	updateCluster(t, ns, "gen", func(ec *v1alpha1.EtcdCluster) {
		ec.Spec.PodMetadata.Annotations = map[string]string{"example.com/team": "storage"}
	})
	gen := getCluster(t, ns, "gen").Generation
	testutil.Eventually(t, 10*time.Second, "conditions computed for the new generation", func() error {
		ec = getCluster(t, ns, "gen")
		if c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.ObservedGeneration != gen {
			return fmt.Errorf("Ready %+v, want it computed for generation %d", c, gen)
		}
		return nil
	})
	var sts appsv1.StatefulSet
	testutil.Eventually(t, 10*time.Second, "the new template on the StatefulSet", func() error {
		if err := get(t, ns, "gen", &sts); err != nil {
			return err
		}
		if sts.Spec.Template.Annotations["example.com/team"] != "storage" {
			return fmt.Errorf("pod template annotations %v, pending %q", sts.Spec.Template.Annotations, sts.Annotations[annotationTemplatePending])
		}
		return nil
	})
	if ec = getCluster(t, ns, "gen"); sts.Status.ObservedGeneration >= sts.Generation {
		t.Fatalf("the StatefulSet's new template is observed already (generation %d, observed %d): nothing to test", sts.Generation, sts.Status.ObservedGeneration)
	}
	if ec.Status.ObservedGeneration == gen {
		t.Fatalf("observedGeneration %d written before the StatefulSet controller saw the new template", gen)
	}
	testutil.Eventually(t, 10*time.Second, "observedGeneration once the StatefulSet controller saw the template", func() error {
		members(t, ns, "gen", all)
		if ec = getCluster(t, ns, "gen"); ec.Status.ObservedGeneration != gen {
			return fmt.Errorf("observedGeneration %d, want %d", ec.Status.ObservedGeneration, gen)
		}
		return nil
	})

	// A sync that fails: the credentials Secret is missing.
	updateCluster(t, ns, "gen", func(ec *v1alpha1.EtcdCluster) {
		ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "mem://gen", CredentialsSecret: &corev1.LocalObjectReference{Name: "gen-store"}}
	})
	gen = getCluster(t, ns, "gen").Generation
	testutil.Eventually(t, 10*time.Second, "Progressing SyncFailed", func() error {
		members(t, ns, "gen", all)
		ec = getCluster(t, ns, "gen")
		c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionProgressing)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonSyncFailed || !strings.Contains(c.Message, "ERR_BACKUP_SECRET") || len(ec.Status.LastErrors) == 0 {
			return fmt.Errorf("Progressing %+v, lastErrors %v", c, ec.Status.LastErrors)
		}
		return nil
	})
	if ec.Status.ObservedGeneration == gen {
		t.Errorf("observedGeneration %d written while lastErrors holds %v", gen, ec.Status.LastErrors)
	}
	if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gen-store"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "synced once the Secret exists", func() error {
		members(t, ns, "gen", all)
		ec = getCluster(t, ns, "gen")
		c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionProgressing)
		if ec.Status.ObservedGeneration != gen || len(ec.Status.LastErrors) > 0 || c == nil || c.Reason == ReasonSyncFailed {
			return fmt.Errorf("observedGeneration %d of %d, lastErrors %v, Progressing %+v", ec.Status.ObservedGeneration, gen, ec.Status.LastErrors, c)
		}
		return nil
	})
}

// A spec the API server cannot check and the members could not run with (here a schedule
// that is no cron schedule) changes nothing: the condition and a Warning Event name the
// field; once it is fixed, the cluster is made.
func TestInvalidSpecChangesNothing(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "bad", 3)
	ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "mem://bad", FullSchedule: "0 * * *"}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "Progressing False, InvalidSpec", func() error {
		c := apimeta.FindStatusCondition(getCluster(t, ns, "bad").Status.Conditions, v1alpha1.ConditionProgressing)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonInvalidSpec || !strings.Contains(c.Message, "spec.backup.fullSchedule") {
			return fmt.Errorf("Progressing %+v", c)
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, "Warning Event InvalidSpec", func() error { return findEventMessage(ns, ReasonInvalidSpec, "spec.backup.fullSchedule") })
	if err := get(t, ns, "bad", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("StatefulSet of an invalid spec: %v, want none", err)
	}
	if err := get(t, ns, configMapName(ec), &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap of an invalid spec: %v, want none", err)
	}
	if g := getCluster(t, ns, "bad").Status.ObservedGeneration; g != 0 {
		t.Errorf("observedGeneration %d of an invalid spec, want 0", g)
	}
	updateCluster(t, ns, "bad", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Backup.FullSchedule = "0 * * * *" })
	testutil.Eventually(t, 10*time.Second, "the StatefulSet once the spec is fixed", func() error { return get(t, ns, "bad", &appsv1.StatefulSet{}) })
}
