package etcdproc

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"

	"go.etcd.io/etcd/server/v3/embed"
	"sigs.k8s.io/yaml"
)

// ownedFlags are the etcd settings Steward sets for every start of a member: its identity,
// where its data is, its URLs, how it joins, its TLS and its authentication tokens. An extra flag may not replace them.
var ownedFlags = []string{
	"name", "data-dir", "wal-dir",
	"initial-cluster", "initial-cluster-state", "initial-cluster-token", "force-new-cluster",
	"max-learners", // etcd's default of one: at most one learner exists (invariant 1)
	"discovery", "discovery-srv", "discovery-srv-name", "discovery-token", "discovery-endpoints",
	"listen-client-urls", "listen-client-http-urls", "listen-peer-urls", "advertise-client-urls", "initial-advertise-peer-urls",
	"logger", "log-outputs", // steward etcd logs to stderr, which the supervisor or the pod keeps
	"client-transport-security", "peer-transport-security", // the cluster's TLS
	"auth-token", // signed tokens, valid on every member, with etcd authentication
}

// flagTypes maps every key of etcd's configuration file (its flag names) to the type of its
// field in embed.Config.
var flagTypes = func() map[string]reflect.Type {
	out := map[string]reflect.Type{}
	t := reflect.TypeOf(embed.Config{})
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" && t.Field(i).IsExported() {
			out[name] = t.Field(i).Type
		}
	}
	return out
}()

// CheckFlags refuses extra etcd flags Steward owns or etcd does not know, and values etcd
// refuses as configuration (a wrong type, or what etcd's own validation rejects). A value
// etcd only refuses when it starts gets through.
func CheckFlags(flags map[string]string) error {
	for _, name := range sortedKeys(flags) {
		if slices.Contains(ownedFlags, name) {
			return fmt.Errorf("etcd flag %q is set by Steward for every member (its identity, data, URLs, how it joins, its TLS and its authentication tokens) and cannot be changed", name)
		}
		if _, ok := flagTypes[name]; !ok {
			return fmt.Errorf("etcd flag %q is not an etcd configuration option: see `etcd --help` for the names (without the leading --)", name)
		}
	}
	c := Config{Name: "check", DataDir: "/nonexistent", ListenClientURLs: "http://127.0.0.1:2379", AdvertiseClientURLs: "http://127.0.0.1:2379",
		ListenPeerURLs: "http://127.0.0.1:2380", InitialAdvertisePeerURLs: "http://127.0.0.1:2380", InitialCluster: "check=http://127.0.0.1:2380",
		InitialClusterState: "new", InitialClusterToken: "check"}
	// Only the flags are checked: a separate HTTP listener keeps etcd's validation from
	// warning, on the caller's output, that HTTP and gRPC would share a port.
	check := maps.Clone(flags)
	if check == nil {
		check = map[string]string{}
	}
	check["listen-client-http-urls"] = "http://127.0.0.1:2378"
	b, err := c.MarshalWith(check)
	if err != nil {
		return err
	}
	if _, err := LoadConfigBytes(b); err != nil {
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // without the name of the temporary file
		}
		return fmt.Errorf("etcd refuses the flags %s: %w", strings.Join(FlagList(flags), " "), err)
	}
	return nil
}

// MarshalWith renders c as etcd's YAML configuration file with the extra flags set over it.
// Values are given as on etcd's command line; a non-string option's value is read as YAML
// (numbers, booleans, lists).
func (c Config) MarshalWith(flags map[string]string) ([]byte, error) {
	if len(flags) == 0 {
		return c.Marshal()
	}
	b, err := c.Marshal()
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for name, value := range flags {
		if t, ok := flagTypes[name]; ok && t.Kind() == reflect.String {
			m[name] = value
			continue
		}
		var v any
		if err := yaml.Unmarshal([]byte(value), &v); err != nil {
			return nil, fmt.Errorf("etcd flag %s=%s: the value does not parse: %w", name, value, err)
		}
		m[name] = v
	}
	return yaml.Marshal(m)
}

// ParseFlags reads NAME=VALUE arguments (etcd's flag names, without the leading --; a
// value may hold commas and equal signs).
func ParseFlags(args []string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range args {
		name, value, ok := strings.Cut(a, "=")
		name = strings.TrimPrefix(name, "--")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: give an etcd flag as NAME=VALUE, e.g. snapshot-count=5000", a)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("etcd flag %q is given twice", name)
		}
		out[name] = value
	}
	return out, nil
}

// FlagList lists flags as NAME=VALUE, by name.
func FlagList(flags map[string]string) []string {
	var out []string
	for _, name := range sortedKeys(flags) {
		out = append(out, name+"="+flags[name])
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
