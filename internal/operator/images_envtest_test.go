package operator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
)

// TestImageAllowlist: a spec.image that --allowed-images does not match gets no StatefulSet,
// ERR_IMAGE_NOT_ALLOWED and a Warning Event naming the image and the flag; an allowed one
// then gets its StatefulSet; and changing that cluster to a refused image leaves the
// StatefulSet's template as it is, nothing waiting.
func TestImageAllowlist(t *testing.T) {
	needEnv(t)
	const refused, allowed = "evil.example.com/miner:latest", "registry.example.com/steward:v2"
	ns := namespace(t)
	ec := newCluster(ns, "img", 1)
	ec.Spec.Image = refused
	if err := k8s.Create(t.Context(), ec); err != nil {
		t.Fatal(err)
	}
	refusedIn := func(what string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, what+": ERR_IMAGE_NOT_ALLOWED", func() error {
			ec := getCluster(t, ns, "img")
			i := slices.IndexFunc(ec.Status.LastErrors, func(e v1alpha1.LastError) bool { return e.Code == ErrImageNotAllowed })
			if i < 0 {
				return fmt.Errorf("lastErrors %+v", ec.Status.LastErrors)
			}
			if d := ec.Status.LastErrors[i].Description; !strings.Contains(d, refused) || !strings.Contains(d, "set spec.image to") {
				return fmt.Errorf("the error %q does not name the image and what to do", d)
			}
			if c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionProgressing); c == nil || !strings.Contains(c.Message, ErrImageNotAllowed) {
				return fmt.Errorf("Progressing %+v does not name %s", c, ErrImageNotAllowed)
			}
			return nil
		})
		testutil.Eventually(t, 10*time.Second, what+": the Event", func() error {
			return findEventMessage(ns, ReasonImageNotAllowed, fmt.Sprintf("spec.image %q is not allowed by the operator (--allowed-images", refused))
		})
	}
	refusedIn("a new cluster")
	if err := get(t, ns, "img", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a StatefulSet for a refused image: %v", err)
	}

	updateCluster(t, ns, "img", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Image = allowed })
	sts := waitStatefulSet(t, ns, "img")
	if img := sts.Spec.Template.Spec.Containers[0].Image; img != allowed {
		t.Fatalf("the StatefulSet runs %s, want %s", img, allowed)
	}
	testutil.Eventually(t, 30*time.Second, "the refusal gone", func() error {
		if errs := getCluster(t, ns, "img").Status.LastErrors; slices.ContainsFunc(errs, func(e v1alpha1.LastError) bool { return e.Code == ErrImageNotAllowed }) {
			return fmt.Errorf("lastErrors %+v", errs)
		}
		return nil
	})

	// Not formed: an allowed template would be taken at once. A refused one is not, nor waits.
	updateCluster(t, ns, "img", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Image = refused })
	refusedIn("an existing cluster")
	if err := get(t, ns, "img", &sts); err != nil {
		t.Fatal(err)
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Image != allowed {
			t.Errorf("container %s of the StatefulSet's template runs %s, want %s as before", c.Name, c.Image, allowed)
		}
	}
	if p := sts.Annotations[annotationTemplatePending]; p != "" {
		t.Errorf("a template waits for a refused image: %s", p)
	}
}
