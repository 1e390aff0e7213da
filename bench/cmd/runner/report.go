package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"time"
)

// render writes this run's section of the report.
func render(o options, m machine, start time.Time, took time.Duration, outs []outcome) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	title := "Quick run (`make bench`: small sizes)"
	if o.full {
		title = "Full run (`make bench FULL=1`: the sizes the issues ask for)"
	}
	p("## %s\n\n", title)
	p("- Command: `%s`\n", o.command)
	if o.commit != "" {
		p("- Commit: `%s`\n", o.commit)
	}
	bl := o.base
	if bl != nil {
		p("- Baseline: `%s` (%s): each benchmark's program and steward built from that commit ran right before this tree's, with the same flags; \"vs baseline\" is this tree's figure / the baseline's, and a figure more than %.0f%% worse (higher for times, sizes and counts, lower for rates) is a **regression**\n", short(bl.commit), bl.why, 100*regressionThreshold)
	}
	p("- Date: %s; the run took %v\n", m.started, took.Round(time.Second))
	p("- Machine: %d cores (%s), %s memory, %s\n", m.cores, orUnknown(m.cpu), orUnknown(m.memory), orUnknown(m.kernel))
	p("- Versions: %s; etcd %s (embedded in steward); reference tools etcdctl/etcdutl %s\n", orUnknown(m.goVersion), orUnknown(m.etcd), orUnknown(m.etcdctl))
	p("- Load average (1/5/15 min) at the start %s, at the end %s: other work shares this machine, so absolute figures vary; ratios come from the same run\n\n", m.loadStart, m.loadEnd)

	vsHead, vsRule, vsNone := "", "", ""
	if bl != nil {
		vsHead, vsRule, vsNone = " vs baseline |", "---|", " |"
	}
	p("| benchmark | measure | Steward | reference | ratio | goal |%s\n|---|---|---|---|---|---|%s\n", vsHead, vsRule)
	for _, out := range outs {
		switch {
		case out.skipped != "":
			p("| %s | — | skipped | | | %s |%s\n", out.b.name, esc(out.skipped), vsNone)
			continue
		case out.err != nil:
			p("| %s | — | **failed** | | | see below |%s\n", out.b.name, vsNone)
			continue
		}
		for i, r := range out.res.Rows {
			ours := figure(r.Ours, r.Unit)
			if r.OursName != "" {
				ours += " (" + r.OursName + ")"
			}
			ref, ratio := "", ""
			if r.RefName != "" {
				ref = figure(r.Reference, r.Unit) + " (" + r.RefName + ")"
				ratio = fmt.Sprintf("%s×", num(r.Ratio))
			}
			goal := r.Goal
			if r.Met != nil {
				if *r.Met {
					goal += ": met"
				} else {
					goal += ": **missed**"
				}
			}
			vs := ""
			switch {
			case bl == nil:
			case out.base == nil || out.base.none != "":
				vs = " no baseline |"
			case i < len(out.cmp):
				vs = " " + esc(out.cmp[i].describe(r.Unit)) + " |"
			}
			p("| %s | %s | %s | %s | %s | %s |%s\n", out.res.Benchmark, esc(r.Measure), esc(ours), esc(ref), ratio, esc(goal), vs)
		}
	}
	p("\nRatios are Steward / reference: for throughput and rates higher is better, for time, latency, CPU and memory lower is better.\n")

	for _, out := range outs {
		if out.skipped != "" {
			continue
		}
		name := out.b.name
		if out.res.Benchmark != "" {
			name = out.res.Benchmark
		}
		p("\n### %s", name)
		if out.res.Title != "" {
			p(": %s", out.res.Title)
		}
		p("\n\n`%s %s` (%v)\n\n", out.b.pkg, strings.Join(benchArgs(o, out.b, tools{steward: "bin/steward", etcdctl: "bin/etcdctl", etcdutl: "bin/etcdutl"}), " "), out.took.Round(time.Second))
		if b := out.base; b != nil && bl != nil {
			if b.none != "" {
				p("Baseline `%s`: no baseline: %s.\n\n", short(bl.commit), esc(b.none))
			} else {
				p("Baseline `%s`: ran right before, in %v.\n\n", short(bl.commit), b.took.Round(time.Second))
			}
		}
		if out.err != nil {
			p("Failed:\n\n```\n%s\n```\n", strings.TrimSpace(out.err.Error()))
			continue
		}
		if len(out.res.Params) > 0 {
			keys := make([]string, 0, len(out.res.Params))
			for k := range out.res.Params {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var parts []string
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s %v", k, out.res.Params[k]))
			}
			p("Parameters: %s.\n\n", strings.Join(parts, "; "))
		}
		same := map[string]int{}
		for _, r := range out.res.Rows {
			same[r.Measure]++
		}
		for _, r := range out.res.Rows {
			if r.Spread != "" {
				label := r.Measure
				if r.OursName != "" && same[r.Measure] > 1 {
					label += " (" + r.OursName + ")"
				}
				p("- %s: %s\n", label, r.Spread)
			}
		}
		for _, n := range out.res.Notes {
			p("- %s\n", n)
		}
	}
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func esc(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// num formats a figure with about three significant digits.
func num(x float64) string {
	a := math.Abs(x)
	switch {
	case a >= 10000:
		return thousands(int64(math.Round(x)))
	case a >= 100:
		return fmt.Sprintf("%.0f", x)
	case a >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []string
	for len(s) > 3 {
		out = append([]string{s[len(s)-3:]}, out...)
		s = s[:len(s)-3]
	}
	out = append([]string{s}, out...)
	r := strings.Join(out, ",")
	if neg {
		r = "-" + r
	}
	return r
}

func figure(x float64, unit string) string { return num(x) + " " + unit }

const intro = `# Benchmarks

Every benchmark measures Steward side by side with its reference in the same run and reports
the ratio; nothing here is a timed assertion in a test. Load comes from real etcd clients
(go.etcd.io/etcd/client/v3) with fixed key and value sizes. The sections between the
` + "`bench:…:begin/end`" + ` markers are generated by ` + "`bench/cmd/runner`" + ` (` + "`make bench`" + `, ` + "`make bench FULL=1`" + `);
the rest of this file is kept as written. bench/README.md says how to run one benchmark on
its own, the result format the runner reads, and how to profile a member during a run.

| benchmark | program | Steward | reference | goal |
|---|---|---|---|---|
| full-snapshot | bench/snapshot | full snapshot into a file:// store with zstd (` + "`steward backup save`" + `, and the sidecar's ` + "`POST /v1/snapshots/full`" + `) | ` + "`etcdctl snapshot save`" + ` of the same member | throughput ratio ≥ 0.9; peak RSS < 100 MiB |
| delta-capture-overhead | bench/deltacapture | write throughput of a 3-member cluster with backups on (delta capture) | the same cluster with ` + "`--backup none`" + ` | ≤ 5% lower (ratio ≥ 0.95) |
| delta-replay | bench/replay | delta replay on etcd's storage layer | one client Txn per revision into etcd with fsync off | ≥ 10×; ≥ 100,000 revisions/s for 1M revisions |
| full-restore | bench/restore | full restore of a full snapshot from a file:// store | ` + "`etcdutl snapshot restore`" + ` of the same snapshot file | time ratio (no goal set) |

`

func markers(mode string) (begin, end string) {
	return fmt.Sprintf("<!-- bench:%s:begin (generated by bench/cmd/runner; edits inside are overwritten) -->", mode),
		fmt.Sprintf("<!-- bench:%s:end -->", mode)
}

// writeSection replaces the mode's section in path (creating the file with an introduction
// and empty sections if needed), keeping the rest of the file.
func writeSection(path, mode, section string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		var sb strings.Builder
		sb.WriteString(intro)
		for _, m := range []string{"quick", "full"} {
			begin, end := markers(m)
			fmt.Fprintf(&sb, "%s\n_Not run yet._\n%s\n\n", begin, end)
		}
		b, err = []byte(sb.String()), nil
	}
	if err != nil {
		return err
	}
	doc := string(b)
	begin, end := markers(mode)
	beginPrefix := fmt.Sprintf("<!-- bench:%s:begin", mode)
	i := strings.Index(doc, beginPrefix)
	j := strings.Index(doc, end)
	block := begin + "\n" + section + end
	switch {
	case i >= 0 && j > i:
		doc = doc[:i] + block + doc[j+len(end):]
	case i < 0 && j < 0:
		doc = strings.TrimRight(doc, "\n") + "\n\n" + block + "\n"
	default:
		return fmt.Errorf("%s: the %s section's markers are damaged (%q … %q); fix or remove them", path, mode, beginPrefix, end)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
