package containerd

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/imagetest"
)

func TestImageNames(t *testing.T) {
	for _, tc := range []struct{ in, stored, display string }{
		{"busybox", "docker.io/library/busybox:latest", "busybox:latest"},
		{"busybox:1.36", "docker.io/library/busybox:1.36", "busybox:1.36"},
		{"docker.io/library/busybox:1.36", "docker.io/library/busybox:1.36", "busybox:1.36"},
		{"org/tool:v2", "docker.io/org/tool:v2", "org/tool:v2"},
		{"ghcr.io/org/tool:v2", "ghcr.io/org/tool:v2", "ghcr.io/org/tool:v2"},
		{"localhost:5000/x", "localhost:5000/x:latest", "localhost:5000/x:latest"},
	} {
		got, err := storedName(tc.in)
		if err != nil || got != tc.stored {
			t.Errorf("storedName(%q) = %q, %v; want %q", tc.in, got, err, tc.stored)
		}
		if d := displayName(got); d != tc.display {
			t.Errorf("displayName(%q) = %q, want %q", got, d, tc.display)
		}
	}
	for _, bad := range []string{"UPPER:1", "a b", "", "x:"} {
		if _, err := storedName(bad); !errors.Is(err, api.ErrInvalidArgument) {
			t.Errorf("storedName(%q) = %v, want invalid_argument", bad, err)
		}
	}
	// Names that are not long-form docker references are shown as stored.
	for _, s := range []string{"busybox:1", "import-2024@sha256:" + strings.Repeat("a", 64), "x"} {
		if d := displayName(s); d != s {
			t.Errorf("displayName(%q) = %q", s, d)
		}
	}
}

// imgFixture is the busybox test image, or a skip when the host has no
// static busybox.
func imgFixture(t *testing.T) imagetest.Image {
	t.Helper()
	img, err := imagetest.Busybox("/bin/busybox")
	if err != nil {
		skipOrFail(t, "a static /bin/busybox is needed to build the test image: "+err.Error())
	}
	return img
}

func tagged(img imagetest.Image, tags ...string) imagetest.Tagged {
	return imagetest.Tagged{Image: img, Tags: tags}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// uniq is a name no other test run uses.
func uniq(base string) string { return base + "-" + randomHex(4) }

// storeNames lists the namespace's stored image names.
func storeNames(t *testing.T, b *Backend) []string {
	t.Helper()
	imgs, err := b.client.ListImages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, img := range imgs {
		out = append(out, img.Name())
	}
	return out
}

// removeAfter removes images by name when the test ends, whatever
// happened.
func removeAfter(t *testing.T, b *Backend, names ...string) {
	t.Cleanup(func() {
		for _, n := range names {
			if err := b.RemoveImage(context.Background(), n); err != nil && !errors.Is(err, api.ErrNotFound) {
				t.Errorf("remove %s: %v", n, err)
			}
		}
	})
}

func imageNames(imgs []api.ImageInfo) []string {
	var out []string
	for _, i := range imgs {
		out = append(out, i.Name)
	}
	return out
}

func TestImageImportListRemove(t *testing.T) {
	b := testBackend(t, t.TempDir())
	ctx := context.Background()
	img := imgFixture(t)
	name := uniq("sandboxd-unit-busybox") + ":1"
	removeAfter(t, b, name)
	archive := must[[]byte](t)(imagetest.DockerSave(tagged(img, name)))
	got, err := b.ImportImage(ctx, bytes.NewReader(archive), "")
	if err != nil {
		t.Fatal(err)
	}
	wantPlatform := "linux/" + runtime.GOARCH
	if len(got) != 1 || got[0].Name != name || !strings.HasPrefix(got[0].Digest, "sha256:") || got[0].Size < 1<<20 || got[0].Platform != wantPlatform || got[0].CreatedAt.IsZero() || time.Since(got[0].CreatedAt) > time.Minute {
		t.Fatalf("imported %+v", got)
	}
	// Stored in the long form, unpacked already; found by either name.
	long := "docker.io/library/" + name
	for _, n := range []string{name, long} {
		ci, err := b.lookupImage(ctx, n)
		if err != nil || ci.Name() != long {
			t.Fatalf("lookupImage(%q) = %v, %v", n, ci, err)
		}
		if ok, err := ci.IsUnpacked(ctx, ""); !ok || err != nil {
			t.Fatalf("not unpacked after import: %v %v", ok, err)
		}
	}
	list, err := b.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list[0].Name != HostImage || !list[0].Builtin || list[0].Platform != wantPlatform {
		t.Errorf("the first image is %+v, want the built-in host image", list[0])
	}
	i := slices.IndexFunc(list, func(x api.ImageInfo) bool { return x.Name == name })
	if i < 0 || list[i] != got[0] {
		t.Fatalf("Images() = %+v; want %+v in it", list, got[0])
	}

	// Importing the same archive again replaces nothing and answers the
	// same image.
	again, err := b.ImportImage(ctx, bytes.NewReader(archive), "")
	if err != nil || len(again) != 1 || again[0].Digest != got[0].Digest {
		t.Fatalf("import again: %+v %v", again, err)
	}

	if err := b.RemoveImage(ctx, HostImage); !errors.Is(err, api.ErrInvalidArgument) {
		t.Errorf("remove host: %v", err)
	}
	if err := b.RemoveImage(ctx, long); err != nil {
		t.Fatal(err)
	}
	if _, err := b.lookupImage(ctx, name); !errdefs.IsNotFound(err) {
		t.Fatalf("after removal: %v", err)
	}
	if err := b.RemoveImage(ctx, name); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("remove a missing image: %v", err)
	}
	for _, n := range storeNames(t, b) {
		if strings.HasPrefix(n, importPrefix) {
			t.Errorf("a temporary import name is left: %s", n)
		}
	}
}

func TestImageImportFormats(t *testing.T) {
	b := testBackend(t, t.TempDir())
	ctx := context.Background()
	img := imgFixture(t)
	base := uniq("sandboxd-unit-fmt")
	type tc struct {
		name    string
		archive []byte
		arg     string
		want    []string
	}
	cases := []tc{
		{"docker save, gzip", imagetest.Gzip(must[[]byte](t)(imagetest.DockerSave(tagged(img, base+":gz")))), "", []string{base + ":gz"}},
		{"docker save, two tags", must[[]byte](t)(imagetest.DockerSave(tagged(img, base+":a", base+":b"))), "", []string{base + ":a", base + ":b"}},
		{"docker save unnamed, with a name", must[[]byte](t)(imagetest.DockerSave(tagged(img))), base + ":named", []string{base + ":named"}},
		{"docker save named, with a further name", must[[]byte](t)(imagetest.DockerSave(tagged(img, base+":own"))), base + ":extra", []string{base + ":own", base + ":extra"}},
		{"OCI layout unnamed, with a name", must[[]byte](t)(imagetest.OCILayout(nil, tagged(img))), base + ":oci", []string{base + ":oci"}},
		{"OCI layout, bare tag, with a name", must[[]byte](t)(imagetest.OCILayout(nil, tagged(img, "latest"))), base + ":ocitag", []string{base + ":ocitag"}},
		{"OCI layout, full reference", must[[]byte](t)(imagetest.OCILayout(nil, tagged(img, "example.com/"+base+":3"))), "", []string{"example.com/" + base + ":3"}},
		{"OCI layout, containerd name", must[[]byte](t)(imagetest.OCILayout(map[string]string{"io.containerd.image.name": "docker.io/library/" + base + ":ctr"}, tagged(img, "ctr"))), "", []string{base + ":ctr"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			removeAfter(t, b, c.want...)
			got, err := b.ImportImage(ctx, bytes.NewReader(c.archive), c.arg)
			if err != nil {
				t.Fatal(err)
			}
			if names := imageNames(got); !slices.Equal(names, c.want) {
				t.Fatalf("imported %v, want %v", names, c.want)
			}
			for _, n := range c.want {
				ci, err := b.lookupImage(ctx, n)
				if err != nil {
					t.Fatal(err)
				}
				if ok, _ := ci.IsUnpacked(ctx, ""); !ok {
					t.Errorf("%s is not unpacked", n)
				}
			}
		})
	}
	for _, n := range storeNames(t, b) {
		if strings.HasPrefix(n, importPrefix) {
			t.Errorf("a temporary import name is left: %s", n)
		}
	}
}

func TestImageImportRefusals(t *testing.T) {
	b := testBackend(t, t.TempDir())
	ctx := context.Background()
	img := imgFixture(t)
	base := uniq("sandboxd-unit-bad")
	notImage := func() []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg})
		tw.Write([]byte("hi\n"))
		tw.Close()
		return buf.Bytes()
	}()
	missingLayer := func() []byte {
		whole := must[[]byte](t)(imagetest.DockerSave(tagged(img, base+":missing")))
		// Drop the layer from the archive, keep manifest.json naming it.
		var out bytes.Buffer
		tr, tw := tar.NewReader(bytes.NewReader(whole)), tar.NewWriter(&out)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if strings.HasSuffix(h.Name, "layer.tar") {
				continue
			}
			tw.WriteHeader(h)
			var body bytes.Buffer
			body.ReadFrom(tr)
			tw.Write(body.Bytes())
		}
		tw.Close()
		return out.Bytes()
	}()
	other := imagetest.New([]string{"PATH=/bin"}, nil, must[[]byte](t)(imagetest.Layer(imagetest.Entry{Name: "other.txt", Mode: 0o644, Body: []byte("x")})))
	foreignArch := "arm64"
	if runtime.GOARCH == "arm64" {
		foreignArch = "amd64"
	}
	foreign := imagetest.NewFor("linux", foreignArch, nil, nil, img.Layers...)
	for _, c := range []struct {
		name, arg, want string
		archive         []byte
		leaves          []string // names that must not exist afterwards
	}{
		{name: "empty", archive: nil, want: "empty"},
		{name: "garbage", archive: bytes.Repeat([]byte("garbage!"), 4096), want: "not a valid image archive"},
		{name: "a tar of no image", archive: notImage, want: "not a valid image archive"},
		{name: "truncated", archive: must[[]byte](t)(imagetest.DockerSave(tagged(img, base+":cut")))[:1<<20], want: "truncated", leaves: []string{base + ":cut"}},
		{name: "missing layer", archive: missingLayer, want: "layer", leaves: []string{base + ":missing"}},
		{name: "unnamed without a name", archive: must[[]byte](t)(imagetest.DockerSave(tagged(img))), want: "names no image"},
		{name: "several with a name", arg: base + ":which", archive: must[[]byte](t)(imagetest.DockerSave(tagged(img, base+":one"), tagged(other, base+":two"))), want: "names 2 images", leaves: []string{base + ":one", base + ":two", base + ":which"}},
		{name: "the host name", arg: "host", archive: must[[]byte](t)(imagetest.DockerSave(tagged(img))), want: "built-in"},
		{name: "an invalid name", arg: "Not Valid", archive: must[[]byte](t)(imagetest.DockerSave(tagged(img))), want: "not a valid image name"},
		{name: "another platform", archive: must[[]byte](t)(imagetest.DockerSave(tagged(foreign, base+":foreign"))), want: "platform", leaves: []string{base + ":foreign"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			removeAfter(t, b, c.leaves...)
			got, err := b.ImportImage(ctx, bytes.NewReader(c.archive), c.arg)
			if !errors.Is(err, api.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("import = %+v, %v; want invalid_argument saying %q", got, err, c.want)
			}
			t.Logf("%v", err)
			for _, n := range c.leaves {
				if _, err := b.lookupImage(ctx, n); !errdefs.IsNotFound(err) {
					t.Errorf("%s exists after a refused import (%v)", n, err)
				}
			}
		})
	}
	for _, n := range storeNames(t, b) {
		if strings.HasPrefix(n, importPrefix) {
			t.Errorf("a temporary import name is left: %s", n)
		}
	}
}

// errReader fails after its data.
type errReader struct {
	r   *bytes.Reader
	err error
}

func (e errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		return n, e.err
	}
	return n, nil
}

func TestImageImportBodyError(t *testing.T) {
	b := testBackend(t, t.TempDir())
	img := imgFixture(t)
	name := uniq("sandboxd-unit-body") + ":1"
	archive := must[[]byte](t)(imagetest.DockerSave(tagged(img, name)))
	tooLarge := api.Errorf(api.ErrTooLarge, "the upload is larger than you may send")
	_, err := b.ImportImage(context.Background(), errReader{bytes.NewReader(archive[:len(archive)/2]), tooLarge}, "")
	if err != tooLarge {
		t.Fatalf("import with a failing body = %v, want the body's error", err)
	}
	if _, err := b.lookupImage(context.Background(), name); !errdefs.IsNotFound(err) {
		t.Fatalf("%s exists after a failed import (%v)", name, err)
	}
}

func TestImageRemoveInUse(t *testing.T) {
	owner := t.TempDir()
	b := testBackend(t, owner)
	ctx := context.Background()
	name := uniq("sandboxd-unit-inuse") + ":1"
	removeAfter(t, b, name)
	if _, err := b.ImportImage(ctx, bytes.NewReader(must[[]byte](t)(imagetest.DockerSave(tagged(imgFixture(t), name)))), ""); err != nil {
		t.Fatal(err)
	}
	img, err := b.lookupImage(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// A container of this daemon made from the image, as create makes
	// them (no task is needed to be in the way).
	id := "sb-unit" + randomHex(4)
	ctr, err := b.client.NewContainer(ctx, id, client.WithImage(img), client.WithSpec(&specs.Spec{}),
		client.WithContainerLabels(map[string]string{labelID: id, labelOwner: owner}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctr.Delete(context.Background()) })
	// Another daemon's container is not this daemon's business.
	other, err := b.client.NewContainer(ctx, id+"x", client.WithImage(img), client.WithSpec(&specs.Spec{}),
		client.WithContainerLabels(map[string]string{labelID: id + "x", labelOwner: owner + "-other"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Delete(context.Background()) })

	err = b.RemoveImage(ctx, name)
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), id) || strings.Contains(err.Error(), id+"x") {
		t.Fatalf("remove an image in use = %v, want conflict naming %s only", err, id)
	}
	if err := ctr.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.RemoveImage(ctx, name); err != nil {
		t.Fatalf("remove once unused: %v", err)
	}
}

func TestImagePull(t *testing.T) {
	b := testBackend(t, t.TempDir())
	ctx := context.Background()
	img := imgFixture(t)
	repo := uniq("unit/pull")
	reg := imagetest.Registry(map[string]imagetest.Image{repo + ":1": img})
	defer reg.Close()
	u, _ := url.Parse(reg.URL)
	ref := u.Host + "/" + repo + ":1"
	removeAfter(t, b, ref)
	got, err := b.PullImage(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != ref || got[0].Digest != imagetest.Digest(img.Manifest()) || got[0].Size < 1<<20 {
		t.Fatalf("pulled %+v", got)
	}
	ci, err := b.lookupImage(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := ci.IsUnpacked(ctx, ""); !ok {
		t.Errorf("%s is not unpacked after the pull", ref)
	}
	for _, c := range []struct {
		ref   string
		class error
		want  string
	}{
		{u.Host + "/" + repo + ":nope", api.ErrNotFound, "no such image"},
		// .invalid never resolves (RFC 2606).
		{"registry.invalid/x/y:1", api.ErrUnavailable, "cannot be reached"},
		{"Bad Ref", api.ErrInvalidArgument, "not a valid image name"},
		{"host", api.ErrInvalidArgument, "built-in"},
	} {
		_, err := b.PullImage(ctx, c.ref)
		if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("pull %s = %v, want %v saying %q", c.ref, err, c.class, c.want)
		} else {
			t.Logf("pull %s: %v", c.ref, err)
		}
	}
}

func TestImagesUnavailable(t *testing.T) {
	b, err := New(Config{Socket: "/nonexistent/containerd.sock", Owner: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if _, err := b.Images(ctx); !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "/nonexistent/containerd.sock") {
		t.Errorf("Images = %v", err)
	}
	if _, err := b.ImportImage(ctx, strings.NewReader("x"), ""); !errors.Is(err, api.ErrUnavailable) {
		t.Errorf("ImportImage = %v", err)
	}
	if _, err := b.PullImage(ctx, "alpine"); !errors.Is(err, api.ErrUnavailable) {
		t.Errorf("PullImage = %v", err)
	}
	if err := b.RemoveImage(ctx, "alpine"); !errors.Is(err, api.ErrUnavailable) {
		t.Errorf("RemoveImage = %v", err)
	}
}

func TestImageImportDecompressedCap(t *testing.T) {
	owner := t.TempDir()
	testBackend(t, owner)
	b, err := New(Config{Socket: os.Getenv("SANDBOXD_TEST_CONTAINERD"), Namespace: "sandboxd-test", Owner: owner, MaxImportBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() }) // after the images' removal
	name := uniq("sandboxd-unit-bomb") + ":1"
	archive := must[[]byte](t)(imagetest.DockerSave(tagged(imgFixture(t), name)))
	if len(archive) <= 1<<20 {
		t.Fatalf("the archive (%d bytes) is not above the cap", len(archive))
	}
	// Compressed, it unfolds past the cap: refused, nothing kept.
	_, err = b.ImportImage(context.Background(), bytes.NewReader(imagetest.Gzip(archive)), "")
	if !errors.Is(err, api.ErrTooLarge) || !strings.Contains(err.Error(), "decompresses to more than 1048576 bytes") {
		t.Fatalf("import of a compressed archive over the cap: %v", err)
	}
	if _, err := b.lookupImage(context.Background(), name); !errdefs.IsNotFound(err) {
		t.Fatalf("%s exists after a refused import (%v)", name, err)
	}
	// Uncompressed, the cap is the caller's business (the daemon bounds
	// the body it reads).
	removeAfter(t, b, name)
	if _, err := b.ImportImage(context.Background(), bytes.NewReader(archive), ""); err != nil {
		t.Fatal(err)
	}
}
