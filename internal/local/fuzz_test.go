package local

import (
	"encoding/json"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzParseSpec: cluster.json is read back by every supervisor start, scale and fault
// command; the supervisor makes (and on scale-down deletes) directories and log files named
// after its members and listens on its ports. Whatever the file holds, parseSpec never
// panics, and a spec it accepts keeps every path inside DIR and yields valid URLs.
func FuzzParseSpec(f *testing.F) {
	good := Spec{Name: "steward", Token: "steward-0a1b2c3d4e5f", Host: "127.0.0.1", CreatedAt: time.Unix(0, 0).UTC(), Backup: "file:///tmp/b",
		Members: []MemberSpec{{Name: "m0", ClientPort: 2379, PeerPort: 2380, SidecarPort: 2385, HealthPort: 2386},
			{Name: "m1", ClientPort: 2381, PeerPort: 2382, SidecarPort: 2387, HealthPort: 2388}}}
	b, _ := json.Marshal(good)
	f.Add(b)
	f.Add([]byte(`{"name":"x","token":"t","host":"localhost","members":[{"name":"../..","clientPort":1,"peerPort":2,"sidecarPort":3,"healthPort":4}]}`))
	f.Add([]byte(`{"members":[]}`))
	f.Add([]byte(`{"token":"t","host":"::1","members":[{"name":"m0","clientPort":70000}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		spec, err := parseSpec(b)
		if err != nil {
			return
		}
		dir := "/cluster"
		for _, m := range spec.Members {
			for _, p := range []string{Dir(dir).MemberData(m.Name), Dir(dir).Log(m.Name, "sidecar"), filepath.Join(dir, "members", m.Name)} {
				if rel, err := filepath.Rel(filepath.Join(dir, "members"), p); (err != nil || strings.HasPrefix(rel, "..") || rel == ".") && !strings.HasPrefix(p, filepath.Join(dir, "logs")+"/") {
					t.Fatalf("member %q: path %s leaves DIR/members", m.Name, p)
				}
			}
			for _, raw := range []string{spec.ClientURL(m), spec.PeerURL(m), spec.SidecarURL(m), spec.HealthURL(m)} {
				u, err := url.Parse(raw)
				if err != nil || u.Port() == "" || u.Path != "" {
					t.Fatalf("member %q: URL %q does not parse as scheme://host:port (%v)", m.Name, raw, err)
				}
			}
		}
	})
}
