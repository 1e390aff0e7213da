// Package monitoring checks deploy/monitoring: the alerting rules (checked and unit-tested with
// promtool), what each alert carries and where its runbook is, and that every series the rules
// and the dashboard read is one Steward or etcd exports.
package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/testutil"
	"sigs.k8s.io/yaml"
)

func monitoringDir() string { return filepath.Join(testutil.RepoRoot(), "deploy", "monitoring") }

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

// ruleGroups are the groups of the PrometheusRule, the one source of the rules.
func ruleGroups(t *testing.T) []ruleGroup {
	t.Helper()
	var groups []ruleGroup
	if err := yaml.Unmarshal(groupsYAML(t), &groups); err != nil {
		t.Fatalf("prometheusrule.yaml's spec.groups: %v", err)
	}
	return groups
}

// groupsYAML is the PrometheusRule's spec.groups as they are written there.
func groupsYAML(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir(), "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &pr); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	if pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("prometheusrule.yaml: kind %q with %d groups, want a PrometheusRule with rules", pr.Kind, len(pr.Spec.Groups))
	}
	out, err := yaml.Marshal(pr.Spec.Groups)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRulesWithPromtool: the PrometheusRule's groups, as a plain rule file, pass promtool's
// check, and every unit test in deploy/monitoring/tests passes (each alert firing, and not
// firing where it should not).
func TestRulesWithPromtool(t *testing.T) {
	promtool := testutil.Tool(t, "promtool")
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, append([]byte("groups:\n"), groupsYAML(t)...), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	tests, err := filepath.Glob(filepath.Join(monitoringDir(), "tests", "*.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no unit tests in deploy/monitoring/tests (%v)", err)
	}
	args := []string{"test", "rules"}
	for _, src := range tests {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.Base(src)) // beside rules.yaml, which the tests name
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, dst)
	}
	if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestAlertsAreDocumentedAndTested: every alert has a severity, a summary and a description
// naming the cluster (namespace/cluster), a runbook_url into its own section of
// docs/monitoring.md, and unit tests that show it firing and not firing.
func TestAlertsAreDocumentedAndTested(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, h := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		sections[githubAnchor(h[1])] = true
	}
	tested := unitTestedAlerts(t)
	const runbooks = "https://github.com/etcd-steward/steward/blob/main/docs/monitoring.md#"
	alerts := 0
	for _, g := range ruleGroups(t) {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
			}
			for _, a := range []string{"summary", "description"} {
				if !strings.Contains(r.Annotations[a], "{{ $labels.namespace }}/{{ $labels.cluster }}") {
					t.Errorf("%s: the %s %q does not name the cluster ({{ $labels.namespace }}/{{ $labels.cluster }})", r.Alert, a, r.Annotations[a])
				}
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbooks)
			if !ok || anchor != strings.ToLower(r.Alert) {
				t.Errorf("%s: runbook_url %q, want %s%s", r.Alert, r.Annotations["runbook_url"], runbooks, strings.ToLower(r.Alert))
			}
			if !sections[anchor] {
				t.Errorf("%s: docs/monitoring.md has no section %q (its runbook)", r.Alert, r.Alert)
			}
			if got := tested[r.Alert]; !got.firing || !got.silent {
				t.Errorf("%s: unit tests show it firing: %t, not firing: %t; want both", r.Alert, got.firing, got.silent)
			}
		}
	}
	if alerts == 0 {
		t.Fatal("no alerts in prometheusrule.yaml")
	}
}

// githubAnchor is the anchor GitHub gives a heading.
func githubAnchor(heading string) string {
	a := strings.ToLower(strings.TrimSpace(heading))
	a = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(a, "")
	return strings.ReplaceAll(a, " ", "-")
}

type testedAlert struct{ firing, silent bool }

// unitTestedAlerts says, for each alert the unit tests evaluate, whether they expect it
// firing at some time and not firing at another.
func unitTestedAlerts(t *testing.T) map[string]testedAlert {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(monitoringDir(), "tests", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]testedAlert{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var file struct {
			Tests []struct {
				AlertRuleTest []struct {
					Alertname string           `json:"alertname"`
					ExpAlerts []map[string]any `json:"exp_alerts"`
				} `json:"alert_rule_test"`
			} `json:"tests"`
		}
		if err := yaml.Unmarshal(b, &file); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, tc := range file.Tests {
			for _, a := range tc.AlertRuleTest {
				got := out[a.Alertname]
				if len(a.ExpAlerts) > 0 {
					got.firing = true
				} else {
					got.silent = true
				}
				out[a.Alertname] = got
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no alert_rule_test in %v", files)
	}
	return out
}
