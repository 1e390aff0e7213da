package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// outputFlag is the -o table|json flag shared by commands that print objects.
type outputFlag struct{ format string }

func (o *outputFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "table", "output format: table or json")
}

// check refuses an output format print does not know, before a command changes anything:
// every command that prints a result calls it first.
func (o *outputFlag) check() error {
	if o.format != "json" && o.format != "table" {
		return fmt.Errorf("unknown output format %q: use -o table or -o json", o.format)
	}
	return nil
}

// json reports whether the output is JSON.
func (o *outputFlag) json() bool { return o.format == "json" }

// print writes v as indented JSON (in the conventions of package units) or, for tables, lets
// fill lay out the rows.
func (o *outputFlag) print(w io.Writer, v any, fill func(t *table)) error {
	if err := o.check(); err != nil {
		return err
	}
	if o.json() {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	fill(t)
	return t.tw.Flush()
}

type table struct{ tw *tabwriter.Writer }

func (t *table) header(cols ...string) { t.row(cols...) }

func (t *table) row(cols ...string) {
	fmt.Fprintln(t.tw, strings.Join(cols, "\t"))
}

// orDashIfZero is the table cell s of value v, or "-" while v is its zero value (a figure not
// known yet).
func orDashIfZero[T comparable](v T, s string) string {
	var zero T
	if v == zero {
		return "-"
	}
	return s
}
