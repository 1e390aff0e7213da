// Package result is the one-line JSON result that every benchmark program prints and the
// runner (bench/cmd/runner) collects. A benchmark prints human-readable progress as it likes
// and, at the end, exactly one line that is a JSON object with a "benchmark" field:
//
//	{"benchmark":"full-snapshot","title":"...","params":{...},"rows":[{...}],"notes":["..."]}
//
// Each row is one measure, Steward's figure side by side with its reference from the same
// run, and the ratio ours/reference.
package result

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Result is what one benchmark program reports.
type Result struct {
	// Benchmark is a short stable name, e.g. "full-snapshot".
	Benchmark string `json:"benchmark"`
	// Title says in a few words what was measured.
	Title string `json:"title"`
	// Params are the sizes and settings of the run (database size, clients, value size...).
	Params map[string]any `json:"params,omitempty"`
	Rows   []Row          `json:"rows"`
	// Notes are sentences for the report: how it was measured, anything unusual.
	Notes []string `json:"notes,omitempty"`
}

// Row is one measure.
type Row struct {
	// Measure names what is measured, e.g. "throughput" or "peak RSS".
	Measure string `json:"measure"`
	// Ours is Steward's figure; Reference the reference's (0 with RefName "" means no reference).
	Ours      float64 `json:"ours"`
	Reference float64 `json:"reference,omitempty"`
	Unit      string  `json:"unit"`
	// OursName and RefName say what ran, e.g. "steward backup save" and "etcdctl snapshot save".
	OursName string `json:"oursName,omitempty"`
	RefName  string `json:"refName,omitempty"`
	// Ratio is Ours/Reference (0 when there is no reference).
	Ratio float64 `json:"ratio,omitempty"`
	// Goal is the target in words, e.g. "ratio ≥ 0.9" or "< 100 MiB"; Met says if it was met
	// (nil: no goal).
	Goal string `json:"goal,omitempty"`
	Met  *bool  `json:"met,omitempty"`
	// Spread describes the variation over repeated runs, e.g. "ratio 0.91–0.97 over 3 runs".
	Spread string `json:"spread,omitempty"`
	// Better says which way Ours is better: HigherBetter or LowerBetter. Empty: implied by
	// the unit (see Direction).
	Better string `json:"better,omitempty"`
}

// Values of Row.Better.
const (
	HigherBetter = "higher"
	LowerBetter  = "lower"
)

// Direction says which way a row's figure is better: Row.Better if set, else what the unit
// implies: rates (a unit ending in "/s") are better higher; times, sizes, CPU, request counts
// and percentages (of failures, stalls, overhead) better lower. "" means it is not known.
func (r Row) Direction() string {
	switch r.Better {
	case HigherBetter, LowerBetter:
		return r.Better
	}
	u := strings.TrimSpace(r.Unit)
	switch {
	case strings.HasSuffix(u, "/s"):
		return HigherBetter
	case u == "":
		return ""
	}
	switch strings.ToLower(strings.TrimPrefix(u, "CPU ")) {
	case "ns", "µs", "us", "ms", "s", "min", "b", "bytes", "kib", "mib", "gib", "req", "%":
		return LowerBetter
	}
	return ""
}

// WithBetter sets which way the row's figure is better (HigherBetter or LowerBetter).
func (r Row) WithBetter(better string) Row {
	r.Better = better
	return r
}

// Compare builds a row with a reference and the ratio ours/reference.
func Compare(measure, unit, oursName string, ours float64, refName string, ref float64) Row {
	r := Row{Measure: measure, Unit: unit, OursName: oursName, Ours: ours, RefName: refName, Reference: ref}
	if ref != 0 {
		r.Ratio = ours / ref
	}
	return r
}

// WithGoal sets the goal text and whether it was met.
func (r Row) WithGoal(goal string, met bool) Row {
	r.Goal, r.Met = goal, &met
	return r
}

// WithSpread sets the spread text.
func (r Row) WithSpread(format string, args ...any) Row {
	r.Spread = fmt.Sprintf(format, args...)
	return r
}

// Print writes r as the one JSON result line.
func (r Result) Print(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// Parse finds the result line in a benchmark's output: the last line that is a JSON object
// with a "benchmark" field. ok is false if there is none.
func Parse(output string) (r Result, ok bool, err error) {
	lines := strings.Split(output, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "{") || !strings.Contains(l, `"benchmark"`) {
			continue
		}
		var res Result
		if err := json.Unmarshal([]byte(l), &res); err != nil {
			return Result{}, false, fmt.Errorf("result line %q is not valid JSON: %w", truncate(l, 120), err)
		}
		if res.Benchmark == "" {
			continue
		}
		return res, true, nil
	}
	return Result{}, false, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Stats summarises repeated samples.
type Stats struct {
	N                   int
	Min, Median, Max    float64
	Mean, StdDevPercent float64
}

// Summarise computes the stats of xs (which it sorts in a copy).
func Summarise(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	st := Stats{N: len(s), Min: s[0], Max: s[len(s)-1]}
	if len(s)%2 == 1 {
		st.Median = s[len(s)/2]
	} else {
		st.Median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	var sum float64
	for _, x := range s {
		sum += x
	}
	st.Mean = sum / float64(len(s))
	if len(s) > 1 && st.Mean != 0 {
		var ss float64
		for _, x := range s {
			ss += (x - st.Mean) * (x - st.Mean)
		}
		st.StdDevPercent = 100 * math.Sqrt(ss/float64(len(s)-1)) / st.Mean
	}
	return st
}

// MiB converts bytes to MiB.
func MiB(b int64) float64 { return float64(b) / (1 << 20) }

// Seconds rounds a duration to milliseconds, in seconds.
func Seconds(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

// Human formats a byte count for people: GiB with two decimals, MiB with one, else KiB.
func Human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d KiB", n>>10)
	}
}

// ParseBytes reads a size flag such as 20MiB, 1GiB or 512K.
func ParseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}, {"", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || f <= 0 {
				return 0, fmt.Errorf("%q is not a size like 100MiB or 1GiB", s)
			}
			return int64(f * float64(u.mult)), nil
		}
	}
	return 0, fmt.Errorf("%q is not a size", s)
}

// Round3 rounds to three decimals, as results are reported.
func Round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// Rounds holds the per-round samples of the two methods a benchmark compares: Steward's
// (Ours) and the reference.
type Rounds[T any] struct {
	OursName, RefName string
	Ours, Ref         []T
}

// Row compares the medians over the rounds of f of both methods, with a goal when met is set.
func (r Rounds[T]) Row(measure, unit string, f func(T) float64, goal string, met func(ours, ref float64) bool) Row {
	median := func(samples []T) float64 {
		xs := make([]float64, len(samples))
		for i, s := range samples {
			xs[i] = f(s)
		}
		return Summarise(xs).Median
	}
	o, ref := median(r.Ours), median(r.Ref)
	row := Compare(measure, unit, r.OursName, o, r.RefName, ref)
	if met != nil {
		row = row.WithGoal(goal, met(o, ref))
	}
	return row
}
