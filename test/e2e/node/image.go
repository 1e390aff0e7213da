package node

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Image is a one-layer container image made from files on this machine, written as a
// docker-archive tarball that `ctr images import` loads: there is no registry to pull from.
type Image struct {
	// Ref is the image reference pods name, e.g. "steward:e2e".
	Ref        string
	Entrypoint []string
	User       string
	// Files maps a path inside the image to a file on this machine (copied with mode 0755).
	Files map[string]string
	// Dirs are empty directories made in the image, with their modes.
	Dirs map[string]os.FileMode
	// Text maps a path inside the image to its contents (mode 0644).
	Text map[string]string
}

// WriteArchive writes the image as a docker-archive tarball to path.
func (img Image) WriteArchive(path string) error {
	layer, err := img.layer()
	if err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": img.Entrypoint, "User": img.User, "Env": []string{"PATH=/usr/local/bin:/usr/bin:/bin:/"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(layerSum[:])}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := hex.EncodeToString(layerSum[:]) + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": []string{img.Ref}, "Layers": []string{layerName}}})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{configName, config}, {layerName, layer}, {"manifest.json", manifest}} {
		if err := writeTarFile(tw, f.name, 0o644, f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o600)
}

func (img Image) layer() ([]byte, error) {
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, d := range sortedKeys(img.Dirs) {
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: int64(img.Dirs[d]), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
	}
	for _, name := range sortedKeys(img.Text) {
		if err := writeTarFile(tw, name, 0o644, []byte(img.Text[name])); err != nil {
			return nil, err
		}
	}
	for _, name := range sortedKeys(img.Files) {
		data, err := os.ReadFile(img.Files[name])
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Ref, err)
		}
		if err := writeTarFile(tw, name, 0o755, data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func writeTarFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: time.Unix(0, 0)}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// StewardImage is the steward image as deploy/Dockerfile lays it out: the static binary at
// /steward, run as the distroless nonroot user, built from bin/e2e/steward.
func StewardImage(bin string) Image {
	return Image{
		Ref: "steward:e2e", Entrypoint: []string{"/steward"}, User: "65532:65532",
		Files: map[string]string{"steward": filepath.Join(bin, "e2e", "steward")},
		Dirs:  map[string]os.FileMode{"etc": 0o755, "tmp": 0o1777, "home": 0o755, "home/nonroot": 0o700},
		Text: map[string]string{
			"etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
			"etc/group":  "root:x:0:\nnonroot:x:65532:\n",
		},
	}
}

// S3Image is the S3 server of the e2e suite (test/e2e/cmd/s3), built into bin/e2e/s3.
func S3Image(bin string) Image {
	return Image{
		Ref: "steward-e2e-s3:e2e", Entrypoint: []string{"/s3"}, User: "65532:65532",
		Files: map[string]string{"s3": filepath.Join(bin, "e2e", "s3")},
		Dirs:  map[string]os.FileMode{"tmp": 0o1777},
	}
}
