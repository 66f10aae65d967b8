// Package imagetest builds small container images for tests, from a static
// binary such as busybox, in the formats sandboxd imports: a `docker save`
// archive and an OCI image layout archive; and serves them from a minimal
// registry (the OCI distribution API's pull side) for pull tests.
//
// It uses the standard library only; nothing but tests imports it.
package imagetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Media types of the images built here.
const (
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// Image is one image: its layers (uncompressed tars, bottom first) and its
// config. Build one with Busybox or New.
type Image struct {
	Layers [][]byte
	Config []byte
}

// BusyboxApplets are the links to busybox that Busybox puts in /bin.
var BusyboxApplets = []string{"sh", "echo", "cat", "ls", "env", "true", "false", "sleep", "id", "pwd", "mkdir", "rm", "touch", "uname", "wc", "head", "grep", "test", "["}

// Busybox returns an image of one layer holding the static busybox at
// bin (a path on this host) as /bin/busybox, with BusyboxApplets linked
// to it, empty /etc and /tmp, and a config with PATH=/bin and Cmd sh, for
// this host's architecture.
func Busybox(bin string) (Image, error) {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return Image{}, err
	}
	var entries []Entry
	entries = append(entries, Entry{Name: "bin/", Mode: 0o755}, Entry{Name: "etc/", Mode: 0o755}, Entry{Name: "tmp/", Mode: 0o1777})
	entries = append(entries, Entry{Name: "bin/busybox", Mode: 0o755, Body: exe})
	for _, a := range BusyboxApplets {
		entries = append(entries, Entry{Name: "bin/" + a, Link: "busybox"})
	}
	entries = append(entries, Entry{Name: "etc/passwd", Mode: 0o644, Body: []byte("root:x:0:0:root:/root:/bin/sh\n")})
	layer, err := Layer(entries...)
	if err != nil {
		return Image{}, err
	}
	return New([]string{"PATH=/bin", "IMAGETEST=busybox"}, []string{"sh"}, layer), nil
}

// Entry is a file of a layer: a directory (Name ends in "/"), a symbolic
// link (Link set) or a regular file.
type Entry struct {
	Name string
	Mode int64
	Body []byte
	Link string
}

// Layer returns an uncompressed layer tar of the entries, in order.
func Layer(entries ...Entry) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	mtime := time.Unix(1700000000, 0)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Mode: e.Mode, ModTime: mtime, Format: tar.FormatPAX}
		switch {
		case strings.HasSuffix(e.Name, "/"):
			h.Typeflag = tar.TypeDir
		case e.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.Link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.Body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// New returns an image of the layers with a config for this host's
// architecture with env and cmd.
func New(env, cmd []string, layers ...[]byte) Image {
	return NewFor("linux", runtime.GOARCH, env, cmd, layers...)
}

// NewFor is New for another platform.
func NewFor(goos, arch string, env, cmd []string, layers ...[]byte) Image {
	diffIDs := make([]string, len(layers))
	for i, l := range layers {
		diffIDs[i] = Digest(l)
	}
	cfg := map[string]any{
		"created":      "2024-01-01T00:00:00Z",
		"architecture": arch,
		"os":           goos,
		"config":       map[string]any{"Env": env, "Cmd": cmd},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": diffIDs},
	}
	b, _ := json.Marshal(cfg)
	return Image{Layers: layers, Config: b}
}

// Digest is the sha256 digest of b, "sha256:<hex>".
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func desc(mediaType string, b []byte) descriptor {
	return descriptor{MediaType: mediaType, Digest: Digest(b), Size: int64(len(b))}
}

// Manifest returns the image's OCI manifest.
func (img Image) Manifest() []byte {
	layers := make([]descriptor, len(img.Layers))
	for i, l := range img.Layers {
		layers[i] = desc(MediaTypeLayer, l)
	}
	b, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeManifest,
		"config":        desc(MediaTypeConfig, img.Config),
		"layers":        layers,
	})
	return b
}

// Blobs returns every blob of the image (manifest, config, layers) by
// digest.
func (img Image) Blobs() map[string][]byte {
	m := map[string][]byte{}
	for _, b := range append([][]byte{img.Manifest(), img.Config}, img.Layers...) {
		m[Digest(b)] = b
	}
	return m
}

// Tagged is an image with the names an archive gives it.
type Tagged struct {
	Image
	// Tags are the docker RepoTags ("busybox-test:1"), or for an OCI
	// layout the org.opencontainers.image.ref.name annotations of its
	// index entries (one entry per tag; none: an unnamed entry).
	Tags []string
}

// DockerSave returns a `docker save` archive (the legacy layout: one
// directory per layer, a config file and manifest.json) of the images.
func DockerSave(imgs ...Tagged) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	type entry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	var manifest []entry
	written := map[string]bool{}
	file := func(name string, body []byte) error {
		if written[name] {
			return nil
		}
		written[name] = true
		if dir := path.Dir(name); dir != "." && !written[dir+"/"] {
			written[dir+"/"] = true
			if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(1700000000, 0)}); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(1700000000, 0)}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	for _, img := range imgs {
		cfgName := strings.TrimPrefix(Digest(img.Config), "sha256:") + ".json"
		if err := file(cfgName, img.Config); err != nil {
			return nil, err
		}
		e := entry{Config: cfgName, RepoTags: img.Tags}
		for _, l := range img.Layers {
			name := strings.TrimPrefix(Digest(l), "sha256:") + "/layer.tar"
			if err := file(name, l); err != nil {
				return nil, err
			}
			e.Layers = append(e.Layers, name)
		}
		if e.RepoTags == nil {
			e.RepoTags = []string{}
		}
		manifest = append(manifest, e)
	}
	mb, err := json.Marshal(manifest)
	if err != nil {
		return nil, err
	}
	if err := file("manifest.json", mb); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// OCILayout returns an OCI image layout archive (oci-layout, index.json,
// blobs/sha256/...) of the images. extra annotations are added to every
// index entry (for example "io.containerd.image.name").
func OCILayout(extra map[string]string, imgs ...Tagged) ([]byte, error) {
	blobs := map[string][]byte{}
	var index []descriptor
	for _, img := range imgs {
		for d, b := range img.Blobs() {
			blobs[d] = b
		}
		m := desc(MediaTypeManifest, img.Manifest())
		tags := img.Tags
		if len(tags) == 0 {
			tags = []string{""}
		}
		for _, t := range tags {
			e := m
			e.Annotations = map[string]string{}
			for k, v := range extra {
				e.Annotations[k] = v
			}
			if t != "" {
				e.Annotations["org.opencontainers.image.ref.name"] = t
			}
			if len(e.Annotations) == 0 {
				e.Annotations = nil
			}
			index = append(index, e)
		}
	}
	idx, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": MediaTypeIndex, "manifests": index})
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	add := func(name string, body []byte) error {
		h := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(1700000000, 0)}
		if strings.HasSuffix(name, "/") {
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return nil, err
	}
	if err := add("blobs/", nil); err != nil {
		return nil, err
	}
	if err := add("blobs/sha256/", nil); err != nil {
		return nil, err
	}
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, d := range digests {
		if err := add("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), blobs[d]); err != nil {
			return nil, err
		}
	}
	if err := add("index.json", idx); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Gzip compresses b.
func Gzip(b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

// Registry serves images read-only over the OCI distribution API, as much
// of it as a pull uses: GET /v2/, manifests by tag or digest, blobs by
// digest. repos maps "repository:tag" (no host) to an image. Close it when
// done. A pull of 127.0.0.1:<port>/repository:tag reaches it over plain
// HTTP (containerd's resolver speaks HTTP to localhost).
func Registry(repos map[string]Image) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "read-only", http.StatusMethodNotAllowed)
			return
		}
		p := strings.TrimPrefix(r.URL.Path, "/v2/")
		if p == "" || p == r.URL.Path {
			w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
			w.WriteHeader(http.StatusOK)
			return
		}
		serve := func(mediaType string, b []byte) {
			w.Header().Set("Content-Type", mediaType)
			w.Header().Set("Docker-Content-Digest", Digest(b))
			w.Header().Set("Content-Length", fmt.Sprint(len(b)))
			w.WriteHeader(http.StatusOK)
			if r.Method == http.MethodGet {
				w.Write(b)
			}
		}
		if repo, ref, ok := cutLast(p, "/manifests/"); ok {
			for name, img := range repos {
				n, tag, _ := strings.Cut(name, ":")
				if n != repo {
					continue
				}
				if m := img.Manifest(); ref == tag || ref == Digest(m) {
					serve(MediaTypeManifest, m)
					return
				}
			}
		}
		if repo, dgst, ok := cutLast(p, "/blobs/"); ok {
			for name, img := range repos {
				if n, _, _ := strings.Cut(name, ":"); n != repo {
					continue
				}
				if b, ok := img.Blobs()[dgst]; ok {
					serve("application/octet-stream", b)
					return
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"%s is not here"}]}`, p)
	}))
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
