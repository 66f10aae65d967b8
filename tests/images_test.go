package tests

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/imagetest"
)

// imgBusybox builds the busybox test image from the host's static busybox.
func imgBusybox(t *testing.T) imagetest.Image {
	t.Helper()
	img, err := imagetest.Busybox("/bin/busybox")
	require(t, "a static /bin/busybox (Debian busybox-static)", err)
	return img
}

// imgCLI runs the sandboxd binary's client with args against d, stdin
// from stdin (nil: none), and returns its stdout, stderr and exit code.
func imgCLI(t *testing.T, d *daemon, stdin *os.File, args ...string) (string, string, int) {
	t.Helper()
	// The connection flags come right after "image SUB".
	full := append([]string{"image", args[0], "--addr", "unix://" + d.sock}, args[1:]...)
	cmd := exec.Command(binary, full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = stdin
	}
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sandboxd %v: %v", full, err)
	}
	return out.String(), errb.String(), code
}

// imgRemoveAtEnd removes images when the test ends (sandboxes made from
// them must be deleted before: register this first).
func imgRemoveAtEnd(t *testing.T, c *client.Client, names ...string) {
	t.Cleanup(func() {
		for _, n := range names {
			if err := c.RemoveImage(context.Background(), n); err != nil && !errors.Is(err, client.ErrNotFound) {
				t.Errorf("remove image %s: %v", n, err)
			}
		}
	})
}

// imgSandbox creates a containerd sandbox from image, deleted when the
// test ends.
func imgSandbox(t *testing.T, c *client.Client, image string) string {
	t.Helper()
	sb, err := c.CreateSandbox(ctxT(t, 60*time.Second), api.CreateSandboxRequest{Backend: api.BackendContainerd, Image: image})
	if err != nil {
		t.Fatalf("create a sandbox of image %s: %v", image, err)
	}
	t.Cleanup(func() {
		if err := c.DeleteSandbox(context.Background(), sb.ID); err != nil && !errors.Is(err, client.ErrNotFound) {
			t.Errorf("delete %s: %v", sb.ID, err)
		}
	})
	return sb.ID
}

// imgSayHi runs sh -c 'echo hi from busybox' in the sandbox.
func imgSayHi(t *testing.T, c *client.Client, id string) {
	t.Helper()
	o := mustRun(t, c, id, api.Exec("sh", "-c", "echo hi from busybox"))
	if o.Stdout != "hi from busybox\n" || exitCode(o) != "0" {
		t.Fatalf("exec in %s: %+v", id, o)
	}
}

func imgNames(imgs []api.ImageInfo) []string {
	var out []string
	for _, i := range imgs {
		out = append(out, i.Name)
	}
	return out
}

// TestImages imports the busybox image through the CLI (a docker save
// file, then an OCI layout from standard input) and through the client,
// runs it, lists, pulls and removes images, and checks the refusals. The
// namespace holds no image afterwards.
func TestImages(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	requireContainerd(t, c)
	ctx := ctxT(t, 5*time.Minute)
	img := imgBusybox(t)
	const dockerName, ociName, stdinName = "busybox-test:1", "busybox-oci:1", "busybox-stdin:1"
	imgRemoveAtEnd(t, c, dockerName, ociName, stdinName)

	dir := t.TempDir()
	write := func(name string, b []byte, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dockerSave, err := imagetest.DockerSave(imagetest.Tagged{Image: img, Tags: []string{dockerName}})
	if err != nil {
		t.Fatal(err)
	}
	dockerTar := write("busybox.tar", dockerSave, nil)
	ociUnnamed, err := imagetest.OCILayout(nil, imagetest.Tagged{Image: img})
	if err != nil {
		t.Fatal(err)
	}
	ociTar := write("busybox-oci.tar", ociUnnamed, nil)

	// The CLI: a file, with its size known: progress in bytes and percent
	// on stderr, the imported names on stdout.
	out, errOut, code := imgCLI(t, d, nil, "import", dockerTar)
	if code != 0 || out != dockerName+"\n" {
		t.Fatalf("image import %s: exit %d, stdout %q, stderr %q", dockerTar, code, out, errOut)
	}
	t.Logf("sandboxd image import %s:\n%s", dockerTar, errOut)
	if !regexp.MustCompile(`uploaded .*busybox\.tar: [0-9.]+ MiB of [0-9.]+ MiB \(100%\)`).MatchString(errOut) {
		t.Errorf("image import printed no final progress: %q", errOut)
	}
	// Standard input, from a file (size known) and from a pipe (not
	// known: bytes only), named by --name after the file.
	f, err := os.Open(ociTar)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, errOut, code = imgCLI(t, d, f, "import", "-", "--name", stdinName)
	if code != 0 || out != stdinName+"\n" || !strings.Contains(errOut, "(100%)") {
		t.Fatalf("image import - < file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	cmd := exec.Command(binary, "image", "import", "--addr", "unix://"+d.sock, "--name", stdinName, "-")
	cmd.Stdin = bytes.NewReader(ociUnnamed)
	var sout, serr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &sout, &serr
	if err := cmd.Run(); err != nil || sout.String() != stdinName+"\n" || !strings.Contains(serr.String(), "uploaded standard input: ") || strings.Contains(serr.String(), "%") {
		t.Fatalf("image import - from a pipe: %v, stdout %q, stderr %q", err, sout.String(), serr.String())
	}

	// The client: the OCI layout, unnamed, named by the request.
	imgs, err := c.ImportImage(ctx, bytes.NewReader(ociUnnamed), ociName)
	if err != nil || len(imgs) != 1 || imgs[0].Name != ociName || imgs[0].Digest != imagetest.Digest(img.Manifest()) {
		t.Fatalf("client import: %+v %v", imgs, err)
	}

	// The list: the built-in image first, then the imported ones.
	list, err := c.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := imgNames(list); !slices.Equal(got, []string{api.HostImage, ociName, stdinName, dockerName}) {
		t.Fatalf("images %v", got)
	}
	for _, i := range list[1:] {
		if !strings.HasPrefix(i.Digest, "sha256:") || i.Size < 1<<20 || i.Platform != "linux/"+runtime.GOARCH || time.Since(i.CreatedAt) > 10*time.Minute {
			t.Errorf("image %+v", i)
		}
	}
	out, _, code = imgCLI(t, d, nil, "ls")
	t.Logf("sandboxd image ls:\n%s", out)
	if code != 0 || !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "host ") || !strings.Contains(out, dockerName+" ") {
		t.Errorf("image ls: exit %d\n%s", code, out)
	}
	out, _, code = imgCLI(t, d, nil, "ls", "--json")
	var fromJSON []api.ImageInfo
	if code != 0 || json.Unmarshal([]byte(out), &fromJSON) != nil || !slices.Equal(imgNames(fromJSON), imgNames(list)) {
		t.Errorf("image ls --json: exit %d\n%s", code, out)
	}

	// A sandbox of each image, by its familiar and its long name: the
	// image's shell and its config's environment.
	id := imgSandbox(t, c, dockerName)
	imgSayHi(t, c, id)
	o := mustRun(t, c, id, api.Exec("env"))
	if !strings.Contains(o.Stdout, "IMAGETEST=busybox\n") || !strings.Contains(o.Stdout, "PATH=/bin\n") {
		t.Errorf("the image's environment is not the sandbox's: %q", o.Stdout)
	}
	o = mustRun(t, c, id, api.Exec("sh", "-c", "pwd; ls /bin/busybox; echo x > f; cat f"))
	if o.Stdout != "/workspace\n/bin/busybox\nx\n" {
		t.Errorf("in the busybox sandbox: %+v", o)
	}
	id2 := imgSandbox(t, c, "docker.io/library/"+ociName)
	imgSayHi(t, c, id2)

	// An image a sandbox uses is not removed, by the client or the CLI.
	if err := c.RemoveImage(ctx, dockerName); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), id) {
		t.Fatalf("remove an image in use: %v", err)
	}
	_, errOut, code = imgCLI(t, d, nil, "rm", ociName)
	if code != 1 || !strings.Contains(errOut, "conflict") || !strings.Contains(errOut, id2) {
		t.Fatalf("image rm of an image in use: exit %d, %q", code, errOut)
	}

	// Refusals.
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Backend: api.BackendContainerd, Image: "busybox-missing:1"}); !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "import") {
		t.Errorf("create from a missing image: %v", err)
	}
	garbage := bytes.Repeat([]byte("this is not a tar archive\n"), 10_000)
	if _, err := c.ImportImage(ctx, bytes.NewReader(garbage), ""); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a valid image archive") {
		t.Errorf("import garbage: %v", err)
	}
	var notImage bytes.Buffer
	tw := tar.NewWriter(&notImage)
	tw.WriteHeader(&tar.Header{Name: "README", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg})
	tw.Write([]byte("hi\n"))
	tw.Close()
	notImageTar := write("not-an-image.tar", notImage.Bytes(), nil)
	_, errOut, code = imgCLI(t, d, nil, "import", "--quiet", notImageTar)
	if code != 1 || !strings.Contains(errOut, "not a valid image archive") || !strings.Contains(errOut, "invalid_argument") {
		t.Errorf("image import of a tar that is no image: exit %d, %q", code, errOut)
	}
	if _, err := c.ImportImage(ctx, bytes.NewReader(ociUnnamed), ""); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "names no image") {
		t.Errorf("import an unnamed image without a name: %v", err)
	}

	// Pull, from a registry this test serves on the loopback interface;
	// and from one that cannot be reached.
	reg := imagetest.Registry(map[string]imagetest.Image{"e2e/busybox:1": img})
	defer reg.Close()
	u, _ := url.Parse(reg.URL)
	pulled := u.Host + "/e2e/busybox:1"
	imgRemoveAtEnd(t, c, pulled)
	out, errOut, code = imgCLI(t, d, nil, "pull", pulled)
	if code != 0 || out != pulled+"\n" {
		t.Fatalf("image pull %s: exit %d, %q %q", pulled, code, out, errOut)
	}
	id3 := imgSandbox(t, c, pulled)
	imgSayHi(t, c, id3)
	_, errOut, code = imgCLI(t, d, nil, "pull", "registry.invalid/e2e/busybox:1")
	if code != 1 || !strings.Contains(errOut, "unavailable") || !strings.Contains(errOut, "cannot be reached") {
		t.Errorf("image pull from an unreachable registry: exit %d, %q", code, errOut)
	}

	// Once the sandboxes are gone, the images go, and the namespace is
	// left empty.
	for _, sb := range []string{id, id2, id3} {
		if err := c.DeleteSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.RemoveImage(ctx, dockerName); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = imgCLI(t, d, nil, "rm", "docker.io/library/"+ociName, stdinName, pulled)
	if code != 0 || len(strings.Fields(out)) != 3 {
		t.Fatalf("image rm: exit %d, %q %q", code, out, errOut)
	}
	if err := c.RemoveImage(ctx, dockerName); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("remove a removed image: %v", err)
	}
	if list, err := c.Images(ctx); err != nil || !slices.Equal(imgNames(list), []string{api.HostImage}) {
		t.Errorf("images at the end: %v %v", imgNames(list), err)
	}
	if b, err := exec.Command("ctr", "-n", e2eNamespace, "images", "ls", "-q").Output(); err == nil && strings.TrimSpace(string(b)) != "" {
		t.Errorf("images left in containerd namespace %s: %s", e2eNamespace, b)
	}
}

// TestImagesTooLarge checks the upload limit: the rest of the body is not
// stored, and nothing is imported.
func TestImagesTooLarge(t *testing.T) {
	d := startDaemon(t, "--set", "containerd.max_image_bytes=100000")
	c := d.client()
	requireContainerd(t, c)
	archive, err := imagetest.DockerSave(imagetest.Tagged{Image: imgBusybox(t), Tags: []string{"busybox-too-large:1"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ImportImage(ctxT(t, time.Minute), bytes.NewReader(archive), "")
	if !errors.Is(err, client.ErrTooLarge) || !strings.Contains(err.Error(), "max_image_bytes") {
		t.Fatalf("import over the limit: %v", err)
	}
	if list, err := c.Images(ctxT(t, time.Minute)); err != nil || len(list) != 1 {
		t.Fatalf("images after a refused import: %v %v", imgNames(list), err)
	}
}
