// Package docs checks that the documentation says what the code does.
package docs

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/testutil"
)

const module = "github.com/etcd-steward/steward/"

// TestPackageMapMatchesImports: the package map in docs/architecture.md lists every package of
// the module, each with exactly the Steward packages its code (not its tests) imports.
func TestPackageMapMatchesImports(t *testing.T) {
	root := testutil.RepoRoot()
	// A package of tests only (test/cli, test/chaos, …) is listed with its tests' imports.
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Imports " "}}{{if not .GoFiles}} {{join .TestImports " "}} {{join .XTestImports " "}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	actual := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		pkg, imps, _ := strings.Cut(strings.TrimSpace(line), ":")
		var own []string
		for imp := range strings.FieldsSeq(imps) {
			if strings.HasPrefix(imp, module) && !slices.Contains(own, strings.TrimPrefix(imp, module)) {
				own = append(own, strings.TrimPrefix(imp, module))
			}
		}
		slices.Sort(own)
		actual[strings.TrimPrefix(pkg, module)] = own
	}

	documented := packageMap(t, filepath.Join(root, "docs", "architecture.md"))
	for pkg, imps := range actual {
		doc, ok := documented[pkg]
		if !ok {
			t.Errorf("docs/architecture.md's package map lacks %s (it imports %v)", pkg, imps)
			continue
		}
		if !slices.Equal(doc, imps) {
			t.Errorf("docs/architecture.md says %s imports %v; it imports %v", pkg, doc, imps)
		}
	}
	for pkg := range documented {
		if _, ok := actual[pkg]; !ok {
			t.Errorf("docs/architecture.md's package map lists %s, which does not exist", pkg)
		}
	}
}

// packageMap reads the rows "| `pkg` | owns | `imp`, `imp` |" (or "none") of the tables of the
// doc's section "Packages".
func packageMap(t *testing.T, path string) map[string][]string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	in := false
	for sc.Scan() {
		if h, ok := strings.CutPrefix(sc.Text(), "## "); ok {
			in = h == "Packages"
		}
		cells := strings.Split(sc.Text(), "|")
		if !in {
			continue
		}
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		pkg := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var imps []string
		if last := strings.TrimSpace(cells[len(cells)-2]); last != "none" {
			for imp := range strings.SplitSeq(last, ",") {
				imps = append(imps, strings.Trim(strings.TrimSpace(imp), "`"))
			}
		}
		slices.Sort(imps)
		m[pkg] = imps
	}
	return m
}
