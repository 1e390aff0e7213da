package operator

import (
	"strings"
	"testing"

	"github.com/etcd-steward/steward/api/v1alpha1"
)

func TestDecideImage(t *testing.T) {
	const def = "registry.example.com/steward:v1"
	tags := []string{"registry.example.com/steward:*"}
	digests := []string{"registry.example.com/steward@sha256:*"}
	cases := []struct {
		name    string
		image   string
		allowed []string
		want    ImageCase
	}{
		{"no allowlist: any image", "evil.example.com/miner:latest", nil, ImageUnrestricted},
		{"the operator's default image, not listed", def, []string{"other.example.com/*"}, ImageOperatorDefault},
		{"a tag of the listed repository", "registry.example.com/steward:v2", tags, ImageListed},
		{"a tag and digest of the listed repository", "registry.example.com/steward:v2@sha256:abc", tags, ImageListed},
		{"a digest of the listed repository", "registry.example.com/steward@sha256:abc", digests, ImageListed},
		{"a tag where only digests are listed", "registry.example.com/steward:v2", digests, ImageNotAllowed},
		{"another repository of the same registry", "registry.example.com/miner:v1", tags, ImageNotAllowed},
		{"a repository whose name starts like the listed one", "registry.example.com/steward-evil:v1", tags, ImageNotAllowed},
		{"* does not cross a /", "registry.example.com/steward:v1/x", tags, ImageNotAllowed},
		{"another registry with the listed path", "evil.example.com/registry.example.com/steward:v1", tags, ImageNotAllowed},
		{"the same repository written short: matched as written", "steward:v2", tags, ImageNotAllowed},
		{"an exact reference", "mirror.example.com/steward:v1", []string{"mirror.example.com/steward:v1"}, ImageListed},
		{"one of several patterns", "mirror.example.com/steward:v9", append([]string{"mirror.example.com/steward:*"}, tags...), ImageListed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideImage(tc.image, def, tc.allowed); got != tc.want {
				t.Errorf("decideImage(%q, %v) = %s, want %s", tc.image, tc.allowed, got, tc.want)
			}
		})
	}
}

func TestImageRefusal(t *testing.T) {
	ec := &v1alpha1.EtcdCluster{}
	allowed := []string{"registry.example.com/steward:*"}
	if err := imageRefusal(ec, "steward:v1", allowed); err != nil {
		t.Errorf("no spec.image (the default runs): %v", err)
	}
	ec.Spec.Image = "evil.example.com/miner:latest"
	err := imageRefusal(ec, "steward:v1", allowed)
	if err == nil {
		t.Fatal("a spec.image no pattern matches is allowed")
	}
	for _, want := range []string{`"evil.example.com/miner:latest"`, "--allowed-images registry.example.com/steward:*", `"steward:v1"`, "set spec.image to"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	for _, c := range statefulSetSpec(ec, "steward:v1", 1).Template.Spec.Containers {
		if c.Image != memberImage(ec, "steward:v1") {
			t.Errorf("container %s runs %s, another image than the one checked", c.Name, c.Image)
		}
	}
}

func TestCheckImagePatterns(t *testing.T) {
	if err := CheckImagePatterns([]string{"registry.example.com/steward:*", "registry.example.com/steward@sha256:*", "mirror/steward:v[0-9]*"}); err != nil {
		t.Errorf("good patterns refused: %v", err)
	}
	for _, bad := range []string{"registry.example.com/steward:[", "", " registry.example.com/steward:*"} {
		if err := CheckImagePatterns([]string{bad}); err == nil || !strings.Contains(err.Error(), "--allowed-images") {
			t.Errorf("pattern %q: error %v, want a refusal naming --allowed-images", bad, err)
		}
	}
}
