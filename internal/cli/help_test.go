package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestHelpHoldsNoSecrets: no flag default comes from a secret. The help of every command is
// rendered with the environment Steward and the store SDKs read holding distinctive values;
// none of the secret ones appears.
func TestHelpHoldsNoSecrets(t *testing.T) {
	secrets := map[string]string{
		"AWS_SECRET_ACCESS_KEY":           "aws-secret-4f1d9c",
		"AWS_SESSION_TOKEN":               "aws-session-7b2e0a",
		"AZURE_STORAGE_KEY":               "azure-key-3c8d1f",
		"AZURE_STORAGE_SAS_TOKEN":         "azure-sas-9e4a2b",
		"AZURE_STORAGE_CONNECTION_STRING": "azure-conn-5d7c3e",
		"GOOGLE_APPLICATION_CREDENTIALS":  "/secret/gcp-6a9b4c.json",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	var walk func(c *cobra.Command)
	commands := 0
	walk = func(c *cobra.Command) {
		var out bytes.Buffer
		c.SetOut(&out)
		c.SetErr(&out)
		if err := c.Help(); err != nil {
			t.Fatalf("%s --help: %v", c.CommandPath(), err)
		}
		commands++
		for name, v := range secrets {
			if strings.Contains(out.String(), v) {
				t.Errorf("%s --help shows %s", c.CommandPath(), name)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRootCommand())
	if commands < 20 {
		t.Fatalf("only %d commands rendered", commands)
	}
}

// TestFlagHelpReadsRight: no flag's help holds a backquote, which pflag would take for the
// name of the flag's value ("--tls steward" instead of "--tls").
func TestFlagHelpReadsRight(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: a backquote in its help: %q", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRootCommand())
}

// TestREADMEUsageIsTrue: the README's Usage block names every command a user runs, and every
// flag it shows exists on the command it shows it with.
func TestREADMEUsageIsTrue(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, usage, found := strings.Cut(string(readme), "## Usage\n\n```sh\n")
	usage, _, closed := strings.Cut(usage, "```")
	if !found || !closed {
		t.Fatal("README.md has no ```sh block under ## Usage")
	}
	root := NewRootCommand()
	shown := map[string]bool{}
	var cmd *cobra.Command
	for _, line := range strings.Split(usage, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if fields[0] == "steward" {
			// The command is the longest run of words after "steward" that names one;
			// continuation lines belong to the command above.
			c, _, err := root.Find(fields[1:])
			if err != nil || c == root {
				t.Errorf("README: %q names no command (%v)", line, err)
				cmd = nil
				continue
			}
			cmd = c
			shown[c.CommandPath()] = true
		}
		if cmd == nil {
			continue
		}
		for _, f := range fields {
			f = strings.Trim(f, "[]|()")
			name, isFlag := strings.CutPrefix(f, "--")
			if !isFlag {
				if short, ok := strings.CutPrefix(f, "-"); ok && len(short) == 1 {
					if cmd.Flags().ShorthandLookup(short) == nil {
						t.Errorf("README: %s has no flag -%s", cmd.CommandPath(), short)
					}
				}
				continue
			}
			name, _, _ = strings.Cut(name, "=")
			if cmd.Flags().Lookup(name) == nil {
				t.Errorf("README: %s has no flag --%s", cmd.CommandPath(), name)
			}
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		if c.Runnable() && !c.HasSubCommands() && !shown[c.CommandPath()] {
			t.Errorf("README's Usage does not show %s", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// TestUnknownSubcommandRefused: a mistyped subcommand is an error (a non-zero exit), never
// the group's help with success; the group alone still shows its help.
func TestUnknownSubcommandRefused(t *testing.T) {
	for _, args := range [][]string{{"local", "stauts"}, {"backup", "lsit"}, {"kubectl", "statsu", "x"}, {"stauts"}} {
		root := NewRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "unknown command") {
			t.Errorf("steward %s: %v; want an unknown command error", strings.Join(args, " "), err)
		}
	}
	root := NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"local"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "Available Commands") {
		t.Errorf("steward local: %v, %q; want its help", err, out.String())
	}
}
