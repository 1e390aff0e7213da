package store

import (
	"context"
	"strings"
	"testing"
)

// TestOpenNeverEchoesSecretParameters: a store URL of every cloud scheme with a secret-bearing
// parameter the driver refuses fails at Open before any I/O, and neither the error nor
// anything it wraps in its message holds the parameter's value, as written or escaped.
func TestOpenNeverEchoesSecretParameters(t *testing.T) {
	const secret = "Sup3r/Secret+Value=42"
	for _, scheme := range []string{"s3", "gs", "azblob"} {
		for _, key := range []string{"secret_key", "access_token", "sas_token", "sig", "password", "credentials", "aws_secret_access_key", "SharedKey"} {
			for _, value := range []string{secret, strings.NewReplacer("/", "%2F", "+", "%2B", "=", "%3D").Replace(secret)} {
				raw := scheme + "://bucket/prefix?" + key + "=" + value
				_, err := Open(context.Background(), raw, Options{})
				if err == nil {
					t.Fatalf("Open(%s) succeeded", raw)
				}
				for _, form := range []string{"Sup3r", "Secret%2B", "Secret+Value"} {
					if strings.Contains(err.Error(), form) {
						t.Errorf("Open(%s) error holds the secret (%q): %v", raw, form, err)
					}
				}
			}
		}
	}
}
