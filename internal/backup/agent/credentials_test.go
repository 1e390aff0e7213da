package agent

import "testing"

// TestStoreOptionsCredentials: each store is opened with its own credentials: the backup
// store with the backup store's, another store (a bootstrap restore's) with the restore
// store's, never the other's.
func TestStoreOptionsCredentials(t *testing.T) {
	c := Config{StoreURL: "s3://backups/c", CredentialsDir: "/creds/backup", RestoreCredentialsDir: "/creds/restore"}
	for url, want := range map[string]string{"s3://backups/c": "/creds/backup", "s3://elsewhere/c": "/creds/restore"} {
		o := c.StoreOptions(url)
		if o.CredentialsDir != want {
			t.Errorf("StoreOptions(%s).CredentialsDir = %q, want %q", url, o.CredentialsDir, want)
		}
		if o.Create {
			t.Errorf("StoreOptions(%s) creates a missing store: only the backup loop writes", url)
		}
	}
}
