package restore

import (
	"fmt"
	"os"
	"slices"

	"github.com/etcd-steward/steward/internal/etcdutil"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"golang.org/x/crypto/bcrypt"
)

// SetRootPassword makes the root user of the etcd data dir log in with password, with the root
// role, before any member starts on it. A restore needs it: the backup holds the auth state of
// the cluster it was taken from, whose root password may not be the one the restored cluster
// is given, and a running etcd with authentication on changes a password only for a client
// that has logged in. Other users, roles and whether authentication is on are kept.
func SetRootPassword(dataDir, password string) error {
	if password == "" {
		return fmt.Errorf("set the root password: the password is empty")
	}
	path := DBPath(dataDir)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("set the root password: no etcd database at %s: %w", path, err)
	}
	// etcd's own cost (bcrypt.DefaultCost): etcd checks the password with the cost stored in the hash.
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		return fmt.Errorf("set the root password: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return fmt.Errorf("set the root password: open database %s (stop the etcd member using it): %w", path, err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(schema.AuthUsers.Name())
		if err != nil {
			return err
		}
		u := &authpb.User{Name: []byte(etcdutil.RootUser)}
		if v := b.Get(u.Name); v != nil {
			if err := u.Unmarshal(v); err != nil {
				return fmt.Errorf("read user %s: %w", etcdutil.RootUser, err)
			}
		}
		u.Password, u.Options = hash, nil
		if !slices.Contains(u.Roles, etcdutil.RootUser) { // the root role has the user's name
			u.Roles = append(u.Roles, etcdutil.RootUser)
			slices.Sort(u.Roles) // etcd keeps a user's roles sorted
		}
		v, err := u.Marshal()
		if err != nil {
			return err
		}
		return b.Put(u.Name, v)
	})
	if err != nil {
		return fmt.Errorf("set the root password in %s: %w", path, err)
	}
	return nil
}
