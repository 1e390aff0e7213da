// Package cli holds steward's cobra commands.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Execute runs the steward command line and returns the process exit code.
func Execute() int { return execute(NewRootCommand()) }

// ExecuteKubectlPlugin runs the kubectl plugin (the kubectl-steward binary: `kubectl steward
// VERB`) and returns the process exit code.
func ExecuteKubectlPlugin() int { return execute(newKubectlCommand("kubectl-steward")) }

// execute runs root until SIGINT or SIGTERM, and returns the exit code its error asks for.
func execute(root *cobra.Command) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		var exit *ExitError
		if errors.As(err, &exit) {
			if exit.Message != "" {
				fmt.Fprintln(os.Stderr, "Error:", exit.Message)
			}
			return exit.Code
		}
		fmt.Fprintln(os.Stderr, "Error:", err)
		return 1
	}
	return 0
}

// The exit codes beyond 0 (success) and 1 (an error): each command's help says which it uses.
const (
	// ExitProblems: the command ran, and what it checked has problems (backup verify).
	ExitProblems = 2
	// ExitDegraded: the cluster serves, but not every member is healthy (local status).
	ExitDegraded = 3
	// ExitDown: the cluster does not serve (local status).
	ExitDown = 4
)

// ExitError ends the program with a given exit code, one of the Exit constants.
type ExitError struct {
	Code    int
	Message string
}

func (e *ExitError) Error() string { return e.Message }

// NewRootCommand builds the full command tree.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "steward",
		Short:         "Self-healing etcd clusters with continuous, point-in-time backups",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newVersionCommand(),
		newEtcdCommand(),
		newSidecarCommand(),
		newLocalCommand(),
		newBackupCommand(),
		newRestoreCommand(),
		newOperatorCommand(),
		newDefragCommand(),
		newMoveLeaderCommand(),
		newCompactCommand(),
		newKubectlCommand("kubectl"),
	)
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every command that only groups others (steward local,
// steward backup, ...) refuse an argument that names none of them, instead of printing its
// help and exiting 0: "steward local stauts" is a mistake, not a request for help.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = cobra.NoArgs
		c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
	}
}
