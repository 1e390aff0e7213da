package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestUsedMetricsExist: every series the alerting rules and the dashboard read is one Steward
// exports (the operator's, the sidecar's, the backup agent's) or one etcd exports, so that a
// renamed metric breaks this test rather than an alert or a panel, silently.
func TestUsedMetricsExist(t *testing.T) {
	used := map[string][]string{} // metric name: where it is read
	for _, g := range ruleGroups(t) {
		for _, r := range g.Rules {
			for _, m := range metricNames(r.Expr) {
				used[m] = append(used[m], "rule "+r.Alert+r.Record)
			}
		}
	}
	for where, expr := range dashboardQueries(t) {
		for _, m := range metricNames(expr) {
			used[m] = append(used[m], "dashboard "+where)
		}
	}
	steward := stewardMetrics(t)
	etcd := etcdMetrics(t)
	missing := func() []string {
		exported := etcd()
		var out []string
		for name := range used {
			if !steward[name] && !exported[name] {
				out = append(out, name)
			}
		}
		slices.Sort(out)
		return out
	}
	// Some of etcd's series appear with its periodic work (the peers' round trips are probed
	// every few seconds): wait for them a while; what is still missing then is reported below.
	_ = testutil.Poll(30*time.Second, time.Second, func() error {
		if m := missing(); len(m) > 0 {
			return fmt.Errorf("missing %v", m)
		}
		return nil
	})
	for _, known := range []string{"steward_cluster_quorate", "steward_backup_ready", "steward_defrag_rounds_total", "steward_backup_full_duration_seconds_bucket"} {
		if !steward[known] {
			t.Fatalf("Steward's metrics as found in its code lack %s: the search is broken (found %d)", known, len(steward))
		}
	}
	if e := etcd(); !e["etcd_server_has_leader"] || !e["etcd_disk_wal_fsync_duration_seconds_bucket"] {
		t.Fatalf("etcd's metrics lack etcd_server_has_leader or etcd_disk_wal_fsync_duration_seconds_bucket (found %d)", len(e))
	}
	for _, name := range []string{"steward_cluster_ready_members", "etcd_mvcc_db_total_size_in_bytes", "grpc_server_handled_total"} {
		if used[name] == nil {
			t.Fatalf("%s is not among the metrics found in the rules and the dashboard: the search is broken (found %v)", name, used)
		}
	}
	for _, name := range missing() {
		where := slices.Compact(slices.Sorted(slices.Values(used[name])))
		t.Errorf("%s (read by %s) is exported neither by Steward nor by etcd", name, strings.Join(where, ", "))
	}
}

// dashboardQueries are the PromQL queries of dashboard.json (panels' targets and the template
// variables' label_values), by panel title or variable name.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir(), "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	out := map[string]string{}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			out[p.Title+" #"+strconv.Itoa(i)] = tg.Expr
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("dashboard.json: variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("dashboard.json: variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
		}
		out["variable "+v.Name] = m[1]
	}
	return out
}

// PromQL, taken apart without Prometheus' parser (too heavy a dependency for the main
// module): what is not a metric name is removed first (quoted strings, label matchers {…},
// ranges and subqueries […], the label lists of by/without/on/ignoring/group_left/group_right,
// Grafana's variables); of the identifiers left, those followed by "(" are functions or
// aggregations and the keywords are operators or modifiers: the others are metric names.
var (
	promqlStrings    = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promqlMatchers   = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges     = regexp.MustCompile(`\[[^\]]*\]`)
	promqlLabelLists = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	grafanaVariables = regexp.MustCompile(`\$\{?\w+\}?`)
	promqlTokens     = regexp.MustCompile(`[0-9][0-9a-zA-Z_.]*|[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promqlKeywords   = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
)

// metricNames are the metric names expr reads.
func metricNames(expr string) []string {
	s := promqlStrings.ReplaceAllString(expr, " ")
	s = grafanaVariables.ReplaceAllString(s, " ")
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlRanges.ReplaceAllString(s, " ")
	s = promqlLabelLists.ReplaceAllString(s, " ")
	var names []string
	for _, loc := range promqlTokens.FindAllStringIndex(s, -1) {
		tok := s[loc[0]:loc[1]]
		if tok[0] >= '0' && tok[0] <= '9' || slices.Contains(promqlKeywords, strings.ToLower(tok)) {
			continue
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue
		}
		names = append(names, tok)
	}
	return names
}

// stewardMetrics are the names of the series Steward's code exports, read from the source of
// the packages that define them (the operator's, the sidecar's, the backup agent's): the Name
// of every prometheus.*Opts literal and the first argument of the packages' own constructors
// (gauge("steward_…", …)), with the series a histogram or summary adds to its name. (A
// package's unexported collectors cannot be listed from outside it, and many exist only once
// they have a value.)
func stewardMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	add := func(name, opts string) {
		out[name] = true
		switch opts {
		case "HistogramOpts":
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case "SummaryOpts":
			out[name+"_sum"], out[name+"_count"] = true, true
		}
	}
	for _, dir := range []string{"internal/operator", "internal/member", "internal/backup/agent"} {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(testutil.RepoRoot(), dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					sel, ok := n.Type.(*ast.SelectorExpr)
					if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
						return true
					}
					if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" {
						return true
					}
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "Name") {
							if name, ok := stringLit(kv.Value); ok {
								add(name, sel.Sel.Name)
							}
						}
					}
				case *ast.CallExpr:
					if _, local := n.Fun.(*ast.Ident); local && len(n.Args) > 0 {
						if name, ok := stringLit(n.Args[0]); ok && strings.HasPrefix(name, "steward_") {
							add(name, "")
						}
					}
				}
				return true
			})
		}
	}
	return out
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// etcdMetrics starts a real 3-member etcd cluster, has it serve writes, reads and a watch,
// and returns what gives the names of the series it exports now: what its /metrics serves
// (etcd registers with the default registry, which steward etcd's health port serves), with
// the series a histogram or summary adds to its name.
func etcdMetrics(t *testing.T) func() map[string]bool {
	t.Helper()
	ms := testutil.Cluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watch := ms[1].Client.Watch(wctx, "/k")
	for i, m := range ms {
		if _, err := m.Client.Put(ctx, "/k", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Client.Get(ctx, "/k", clientv3.WithSerializable()); err != nil {
			t.Fatal(err)
		}
	}
	<-watch
	return func() map[string]bool {
		families, err := prometheus.DefaultGatherer.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, f := range families {
			name := f.GetName()
			out[name] = true
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
			case dto.MetricType_SUMMARY:
				out[name+"_sum"], out[name+"_count"] = true, true
			}
		}
		return out
	}
}
