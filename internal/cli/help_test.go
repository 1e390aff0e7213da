package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
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
