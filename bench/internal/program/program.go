// Package program is the start every benchmark program's main shares: its flags for the
// binaries it runs, sizes, the work dir and -keep; checking them; making the work dir and
// removing it at the end; and reporting a failure.
//
//	p := program.New("heal bench")
//	p.Binary(&o.steward, "steward", "bin/steward", "steward binary")
//	p.Size(&o.size, "size", "100MiB", "database size")
//	p.Rounds(&o.rounds, "rounds", 3, "rounds")
//	p.WorkDir(&o.keep, "keep the cluster and work dir at the end")
//	p.Check(func() error { ... })
//	p.Main(func(ctx context.Context, dir string) error { return run(ctx, o, dir) })
package program

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/etcd-steward/steward/bench/internal/result"
)

// Program collects a benchmark program's shared flags until Main parses them.
type Program struct {
	name   string
	dir    string
	keep   *bool
	bins   []binFlag
	sizes  []sizeFlag
	checks []func() error
}

type binFlag struct {
	name string
	path *string
}

type sizeFlag struct {
	name  string
	value *string
	to    *int64
}

// New starts a program; name prefixes its errors, e.g. "heal bench".
func New(name string) *Program {
	return &Program{name: name}
}

// Binary adds the flag of a binary the program runs (steward, etcdctl, etcdutl). Main makes
// it absolute and fails if it is missing.
func (p *Program) Binary(path *string, name, def, usage string) {
	flag.StringVar(path, name, def, usage)
	p.bins = append(p.bins, binFlag{name, path})
}

// Size adds a size flag (e.g. 64MiB, 1GiB), parsed by Main into to.
func (p *Program) Size(to *int64, name, def, usage string) {
	s := flag.String(name, def, usage)
	p.sizes = append(p.sizes, sizeFlag{name, s, to})
}

// List adds a flag of comma-separated values, which Main appends to *to (after any set
// before).
func (p *Program) List(to *[]string, name, usage string) {
	s := flag.String(name, "", usage)
	p.Check(func() error {
		if *s != "" {
			*to = append(*to, strings.Split(*s, ",")...)
		}
		return nil
	})
}

// Rounds adds an int flag that must be at least 1 (rounds, repeats).
func (p *Program) Rounds(to *int, name string, def int, usage string) {
	flag.IntVar(to, name, def, usage)
	p.Check(func() error {
		if *to < 1 {
			return fmt.Errorf("-%s must be at least 1", name)
		}
		return nil
	})
}

// WorkDir adds -dir (the work dir; default: a new temporary one, removed at the end) and,
// if keep is not nil, -keep with the given usage: the temporary work dir is then kept too.
func (p *Program) WorkDir(keep *bool, keepUsage string) {
	flag.StringVar(&p.dir, "dir", "", "work dir (default: a new temp dir, removed at the end)")
	if keep != nil {
		flag.BoolVar(keep, "keep", false, keepUsage)
		p.keep = keep
	}
}

// Check adds a check of the flags, run by Main after parsing them.
func (p *Program) Check(check func() error) {
	p.checks = append(p.checks, check)
}

// Main parses and checks the flags (exit status 2 if they are wrong), makes the work dir,
// runs run in it and removes it unless it was given with -dir or -keep is set; if run fails it
// prints the error and exits with status 1.
func (p *Program) Main(run func(ctx context.Context, dir string) error) {
	flag.Parse()
	if err := p.parse(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", p.name, err)
		os.Exit(2)
	}
	if err := p.run(context.Background(), run); err != nil {
		p.Fail(err)
	}
}

// Fail prints err and exits with status 1.
func (p *Program) Fail(err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", p.name, err)
	os.Exit(1)
}

func (p *Program) parse() error {
	for _, s := range p.sizes {
		n, err := result.ParseBytes(*s.value)
		if err != nil {
			return fmt.Errorf("-%s: %w", s.name, err)
		}
		*s.to = n
	}
	for _, b := range p.bins {
		abs, err := filepath.Abs(*b.path)
		if err != nil {
			return fmt.Errorf("-%s: %w", b.name, err)
		}
		if _, err := os.Stat(abs); err != nil {
			hint := "make build"
			if b.name != "steward" {
				hint = "make tools"
			}
			return fmt.Errorf("-%s: %w (build it with `%s`)", b.name, err, hint)
		}
		*b.path = abs
	}
	for _, c := range p.checks {
		if err := c(); err != nil {
			return err
		}
	}
	return nil
}

func (p *Program) run(ctx context.Context, run func(ctx context.Context, dir string) error) (err error) {
	dir := p.dir
	if dir == "" {
		prefix := "steward-" + strings.ReplaceAll(p.name, " ", "-") + "-"
		if dir, err = os.MkdirTemp("", prefix); err != nil {
			return err
		}
		if p.keep == nil || !*p.keep {
			defer os.RemoveAll(dir)
		} else {
			defer fmt.Fprintf(os.Stderr, "%s: the work dir %s is kept\n", p.name, dir)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return run(ctx, dir)
}
