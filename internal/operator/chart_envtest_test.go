package operator

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// renderChart is `helm template` of the chart in release namespace ns with the --set values.
func renderChart(t *testing.T, release, ns string, set ...string) (string, error) {
	t.Helper()
	args := []string{"template", release, filepath.Join(testutil.RepoRoot(), "deploy", "helm", "steward"), "--namespace", ns}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(testutil.Tool(t, "k8s/helm"), args...).CombinedOutput()
	return string(out), err
}

// chartObjects are the objects of a rendered chart.
func chartObjects(t *testing.T, rendered string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(rendered, -1) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("a rendered document: %v\n%s", err, doc)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

// TestChartValues: the chart lints, renders with each value a user may set, and the API server
// takes every object of every rendering (server-side dry run); names and labels are the
// release's; the ServiceMonitor selects the operator's metrics Service; the values schema
// refuses what the operator could not run with.
func TestChartValues(t *testing.T) {
	needEnv(t)
	chartDir := filepath.Join(testutil.RepoRoot(), "deploy", "helm", "steward")
	if out, err := exec.Command(testutil.Tool(t, "k8s/helm"), "lint", "--strict", chartDir).CombinedOutput(); err != nil {
		t.Errorf("helm lint: %v\n%s", err, out)
	}
	meta, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	appVersion := regexp.MustCompile(`(?m)^appVersion: "?([^"\n]+)"?$`).FindSubmatch(meta)
	if appVersion == nil {
		t.Fatal("Chart.yaml has no appVersion")
	}
	ns, elsewhere := namespace(t), namespace(t)
	for _, c := range []struct {
		name string
		set  []string
		// check looks at the rendered objects.
		check func(objs []*unstructured.Unstructured) error
	}{
		{"defaults", nil, func(objs []*unstructured.Unstructured) error {
			d := find(objs, "Deployment", "rel-operator")
			if d == nil {
				return fmt.Errorf("no Deployment rel-operator")
			}
			image := "steward:" + string(appVersion[1])
			if s := fmt.Sprint(d.Object["spec"]); !strings.Contains(s, "image:"+image) || !strings.Contains(s, "--member-image="+image) {
				return fmt.Errorf("the operator and its members do not run %s (the chart's appVersion): %s", image, s)
			}
			if find(objs, "PodDisruptionBudget", "rel-operator") != nil {
				return fmt.Errorf("a PodDisruptionBudget for a single replica")
			}
			if find(objs, "PrometheusRule", "") != nil || find(objs, "ConfigMap", "") != nil {
				return fmt.Errorf("alerting rules or a dashboard made although not asked for")
			}
			return nil
		}},
		{"everything set", []string{"replicas=2", "serviceAccount.create=false", "serviceAccount.name=existing", "imagePullSecrets[0].name=pull",
			"nodeSelector.disk=ssd", "tolerations[0].key=dedicated", "tolerations[0].operator=Exists", "priorityClassName=system-cluster-critical",
			"podAnnotations.a=b", "podLabels.team=db", "logLevel=debug", "image.tag=v9", "metrics.readers[0].kind=ServiceAccount",
			"metrics.readers[0].name=prometheus", "metrics.readers[0].namespace=monitoring", "watchNamespace=" + ns,
			"allowedImages[0]=registry.example.com/steward:*", "allowedImages[1]=registry.example.com/steward@sha256:*"},
			func(objs []*unstructured.Unstructured) error {
				if find(objs, "ServiceAccount", "") != nil {
					return fmt.Errorf("a ServiceAccount made although serviceAccount.create is false")
				}
				if find(objs, "PodDisruptionBudget", "rel-operator") == nil {
					return fmt.Errorf("no PodDisruptionBudget for 2 replicas")
				}
				spec := fmt.Sprint(find(objs, "Deployment", "rel-operator").Object["spec"])
				for _, want := range []string{"serviceAccountName:existing", "name:pull", "disk:ssd", "key:dedicated", "priorityClassName:system-cluster-critical",
					"a:b", "team:db", "--log-level=debug", "image:steward:v9",
					"--allowed-images=registry.example.com/steward:*,registry.example.com/steward@sha256:*"} {
					if !strings.Contains(spec, want) {
						return fmt.Errorf("the Deployment lacks %s: %s", want, spec)
					}
				}
				if find(objs, "ClusterRoleBinding", "rel-metrics-reader") == nil {
					return fmt.Errorf("metrics.readers bound to nothing")
				}
				return nil
			}},
		{"monitors", []string{"metrics.monitors=true"}, func(objs []*unstructured.Unstructured) error {
			svc, sm := find(objs, "Service", "rel-operator-metrics"), find(objs, "ServiceMonitor", "rel-operator")
			if svc == nil || sm == nil {
				return fmt.Errorf("no metrics Service or ServiceMonitor")
			}
			selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
			labels := svc.GetLabels()
			for k, v := range selector {
				if labels[k] != v {
					return fmt.Errorf("the ServiceMonitor selects %s=%s, which the metrics Service (labels %v) lacks", k, v, labels)
				}
			}
			if s := fmt.Sprint(sm.Object["spec"]); !strings.Contains(s, "scheme:https") || !strings.Contains(s, "port:metrics") || !strings.Contains(s, "honorLabels:true") {
				return fmt.Errorf("the ServiceMonitor does not scrape the metrics port over HTTPS keeping the series' namespace label: %s", s)
			}
			return memberMonitorScrapes(find(objs, "PodMonitor", "rel-members"), ns)
		}},
		{"alerts and dashboard", []string{"monitoring.prometheusRule.enabled=true", "monitoring.dashboard.enabled=true"},
			func(objs []*unstructured.Unstructured) error {
				return alertsAndDashboard(objs, ns, map[string]string{"grafana_dashboard": "1"})
			}},
		{"alerts and dashboard elsewhere", []string{"monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.labels.release=prom",
			"monitoring.prometheusRule.namespace=" + elsewhere, "monitoring.dashboard.enabled=true", "monitoring.dashboard.namespace=" + elsewhere,
			"monitoring.dashboard.label=dashboards", "monitoring.dashboard.labelValue=etcd", "monitoring.dashboard.annotations.grafana_folder=etcd"},
			func(objs []*unstructured.Unstructured) error {
				if err := alertsAndDashboard(objs, elsewhere, map[string]string{"dashboards": "etcd"}); err != nil {
					return err
				}
				if l := find(objs, "PrometheusRule", "rel-etcd").GetLabels(); l["release"] != "prom" {
					return fmt.Errorf("the PrometheusRule lacks the label release=prom: %v", l)
				}
				if a := find(objs, "ConfigMap", "rel-dashboard").GetAnnotations(); a["grafana_folder"] != "etcd" {
					return fmt.Errorf("the dashboard's ConfigMap lacks the annotation grafana_folder=etcd: %v", a)
				}
				return nil
			}},
		{"plain metrics", []string{"metrics.plain=true"}, func(objs []*unstructured.Unstructured) error {
			if s := fmt.Sprint(find(objs, "Deployment", "rel-operator").Object["spec"]); !strings.Contains(s, "--metrics-plain") {
				return fmt.Errorf("metrics.plain does not reach the operator: %s", s)
			}
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rendered, err := renderChart(t, "rel", ns, c.set...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, rendered)
			}
			objs := chartObjects(t, rendered)
			if err := c.check(objs); err != nil {
				t.Error(err)
			}
			var apply []string
			for _, o := range objs {
				if !strings.HasPrefix(o.GetName(), "rel-") && o.GetKind() != "ServiceAccount" {
					t.Errorf("%s %s: not named after the release", o.GetKind(), o.GetName())
				}
				if o.GetLabels()["app.kubernetes.io/instance"] != "rel" && !strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
					t.Errorf("%s %s: no app.kubernetes.io/instance label", o.GetKind(), o.GetName())
				}
				if o.GetAPIVersion() == "monitoring.coreos.com/v1" {
					continue // the Prometheus Operator's kinds are not installed here
				}
				raw, err := yaml.Marshal(o.Object)
				if err != nil {
					t.Fatal(err)
				}
				apply = append(apply, string(raw))
			}
			if out, err := kubectlIn(t, strings.Join(apply, "---\n"), "apply", "--dry-run=server", "-f", "-"); err != nil {
				t.Errorf("refused by the API server: %v\n%s", err, out)
			}
		})
	}
	for _, bad := range []struct{ set, want string }{
		{"logLevel=loud", "logLevel"},
		{"replicas=0", "replicas"},
		{"graces.notReady=five", "notReady"},
		{"watchNamespace=Team_A", "watchNamespace"},
		{"watchnamespace=a", "watchnamespace"},
		{"monitoring.dashboard.labelValue=1", "labelValue"},
		{"monitoring.prometheusRule.namespace=Team_A", "namespace"},
		{"allowedImages[0]=registry.example.com/steward:* ", "allowedImages"},
	} {
		if out, err := renderChart(t, "rel", ns, bad.set); err == nil || !strings.Contains(out, bad.want) {
			t.Errorf("--set %s: %v, want refused naming %s:\n%s", bad.set, err, bad.want, out)
		}
	}
}

// alertsAndDashboard checks that the rendered objects hold, in namespace ns, a PrometheusRule
// whose groups are deploy/monitoring's, and a ConfigMap holding deploy/monitoring's dashboard
// as it is, labelled for Grafana's dashboard sidecar with label.
func alertsAndDashboard(objs []*unstructured.Unstructured, ns string, label map[string]string) error {
	dir := filepath.Join(testutil.RepoRoot(), "deploy", "monitoring")
	rule, cm := find(objs, "PrometheusRule", "rel-etcd"), find(objs, "ConfigMap", "rel-dashboard")
	if rule == nil || cm == nil {
		return fmt.Errorf("no PrometheusRule rel-etcd or ConfigMap rel-dashboard")
	}
	b, err := os.ReadFile(filepath.Join(dir, "prometheusrule.yaml"))
	if err != nil {
		return err
	}
	var want map[string]any
	if err := yaml.Unmarshal(b, &want); err != nil {
		return err
	}
	if rule.GetAPIVersion() != want["apiVersion"] || !reflect.DeepEqual(rule.Object["spec"], want["spec"]) {
		return fmt.Errorf("the rendered PrometheusRule differs from deploy/monitoring/prometheusrule.yaml: run make generate")
	}
	dashboard, err := os.ReadFile(filepath.Join(dir, "dashboard.json"))
	if err != nil {
		return err
	}
	if got, _, _ := unstructured.NestedString(cm.Object, "data", "steward-etcd-cluster.json"); got != string(dashboard) {
		return fmt.Errorf("the ConfigMap's steward-etcd-cluster.json differs from deploy/monitoring/dashboard.json: run make generate")
	}
	labels := cm.GetLabels()
	for k, v := range label {
		if labels[k] != v {
			return fmt.Errorf("the dashboard's ConfigMap is not labelled %s=%s for Grafana's sidecar: %v", k, v, labels)
		}
	}
	if rule.GetNamespace() != ns || cm.GetNamespace() != ns {
		return fmt.Errorf("the PrometheusRule is in namespace %q, the dashboard in %q, want %q", rule.GetNamespace(), cm.GetNamespace(), ns)
	}
	return nil
}

// TestMemberPodMonitor: the PodMonitor of deploy/monitoring scrapes the members as the
// chart's does.
func TestMemberPodMonitor(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "deploy", "monitoring", "podmonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := memberMonitorScrapes(find(chartObjects(t, string(b)), "PodMonitor", ""), "db"); err != nil {
		t.Error(err)
	}
}

// memberMonitorScrapes checks that the PodMonitor pm selects the member pods of a cluster in
// namespace ns, scrapes both the sidecar's and etcd's /metrics on ports the pods name, and
// labels every series with the cluster's name as "cluster", as the operator's series are.
func memberMonitorScrapes(pm *unstructured.Unstructured, ns string) error {
	if pm == nil {
		return fmt.Errorf("no PodMonitor")
	}
	ec := newCluster(ns, "main", 3)
	pod := statefulSetSpec(ec, "steward:test", 3).Template
	selector, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	for k, v := range selector {
		if pod.Labels[k] != v {
			return fmt.Errorf("the PodMonitor selects %s=%s, which the member pods (labels %v) lack", k, v, pod.Labels)
		}
	}
	exprs, _, _ := unstructured.NestedSlice(pm.Object, "spec", "selector", "matchExpressions")
	for _, e := range exprs {
		key := fmt.Sprint(e.(map[string]any)["key"])
		if _, ok := pod.Labels[key]; !ok {
			return fmt.Errorf("the PodMonitor selects pods labelled %s, which the member pods (labels %v) are not", key, pod.Labels)
		}
	}
	if everywhere, _, _ := unstructured.NestedBool(pm.Object, "spec", "namespaceSelector", "any"); !everywhere {
		return fmt.Errorf("the PodMonitor does not look in every namespace")
	}
	ports := map[string]bool{}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	scraped := map[string]bool{}
	for _, e := range endpoints {
		ep := e.(map[string]any)
		port := fmt.Sprint(ep["port"])
		if !ports[port] || ep["path"] != "/metrics" {
			return fmt.Errorf("endpoint %v: not /metrics on a port the member pods name (%v)", ep, ports)
		}
		relabel := fmt.Sprint(ep["relabelings"])
		if !strings.Contains(relabel, "sourceLabels:[__meta_kubernetes_pod_label_etcd_steward_dev_cluster]") || !strings.Contains(relabel, "targetLabel:cluster") {
			return fmt.Errorf("endpoint %v does not label its series with the cluster's name (label %s) as \"cluster\"", ep, LabelCluster)
		}
		scraped[port] = true
	}
	if !scraped["sidecar"] || !scraped["health"] {
		return fmt.Errorf("the PodMonitor scrapes ports %v, want the sidecar's and etcd's (health)", scraped)
	}
	return nil
}

// find is the object of the kind and name ("" any name) among objs.
func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	return nil
}

// TestChartNamespacedInstall: the chart installed with watchNamespace grants the operator its
// rules in that namespace only: it may delete pods and write Secrets there and nowhere else,
// and cluster-wide only review tokens and access (for its /metrics).
func TestChartNamespacedInstall(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	release, watched, other := namespace(t), namespace(t), namespace(t)
	chart, err := renderChart(t, "ns-"+release, release, "watchNamespace="+watched)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, chart)
	}
	if out, err := kubectlIn(t, chart, "apply", "-f", "-"); err != nil {
		t.Fatalf("applying the chart: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = kubectlIn(t, chart, "delete", "--ignore-not-found", "-f", "-")
	})
	operator := "system:serviceaccount:" + release + ":ns-" + release + "-operator"
	may := func(ns, verb, group, resource string) bool {
		t.Helper()
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{User: operator,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + release, "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource}}}
		if err := k8s.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	testutil.Eventually(t, 30*time.Second, "the chart's Role in effect", func() error {
		if !may(watched, "delete", "", "pods") {
			return fmt.Errorf("the operator may not delete pods in %s yet", watched)
		}
		return nil
	})
	for _, c := range []struct {
		ns, verb, group, resource string
		want                      bool
	}{
		{watched, "delete", "", "pods", true},
		{watched, "update", "", "secrets", true},
		{watched, "watch", "", "secrets", true}, // the cache of Steward's own Secrets
		{watched, "create", "apps", "statefulsets", true},
		{watched, "update", v1alpha1.GroupVersion.Group, "etcdclusters", true},
		{other, "delete", "", "pods", false},
		{other, "update", "", "secrets", false},
		{other, "list", "", "secrets", false},
		{other, "create", "rbac.authorization.k8s.io", "roles", false},
		{"", "list", v1alpha1.GroupVersion.Group, "etcdclusters", false},
		{"", "create", "authentication.k8s.io", "tokenreviews", true},
		{"", "create", "authorization.k8s.io", "subjectaccessreviews", true},
	} {
		where := c.ns
		if where == "" {
			where = "cluster-wide"
		}
		if got := may(c.ns, c.verb, c.group, c.resource); got != c.want {
			t.Errorf("the operator may %s %s.%s in %s: %v, want %v", c.verb, c.resource, c.group, where, got, c.want)
		}
	}
}
