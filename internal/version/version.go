// Package version reports the build's version.
package version

import (
	"runtime/debug"

	etcdversion "go.etcd.io/etcd/api/v3/version"
)

// Version is set at link time (-ldflags "-X ...version.Version=v1.2.3"); otherwise the module version or "dev".
var Version = ""

// Info describes this build.
type Info struct {
	Steward string `json:"steward"`
	Etcd    string `json:"etcd"`
	Go      string `json:"go"`
	Commit  string `json:"commit,omitempty"`
}

// Get returns the build information.
func Get() Info {
	info := Info{Steward: Version, Etcd: etcdversion.Version}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info.Go = bi.GoVersion
		if info.Steward == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Steward = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				info.Commit = s.Value
			}
		}
	}
	if info.Steward == "" {
		info.Steward = "dev"
	}
	return info
}
