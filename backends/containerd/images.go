package containerd

// Images: the backend's image store (backends.ImageStore) is containerd's
// own, in the backend's namespace. Images get there by import (a
// `docker save` or OCI image layout tar, through the client's Import) or
// by pull (client.Pull), and are unpacked into the snapshotter right away,
// so that the first sandbox made from one does not wait for it.
//
// Names. containerd stores docker references in their long form
// ("docker.io/library/busybox:1"), as its importer and puller write them;
// the API shows them in their familiar form ("busybox:1"), the one people
// write in a RepoTag or a create request, and a lookup takes either form
// (lookupImage). Names that are not docker references are kept and shown
// as they are.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	remoteerrors "github.com/containerd/containerd/v2/core/remotes/errors"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/containerd/errdefs"
	clog "github.com/containerd/log"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	digest "github.com/opencontainers/go-digest"
	"github.com/sirupsen/logrus"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
)

var _ backends.ImageStore = (*Backend)(nil)

// quiet sends what containerd's client logs during an image operation
// (a pull's "fetch failed", for one) to the backend's logger at debug
// level, rather than to the daemon's stderr in logrus's format.
func (b *Backend) quiet(ctx context.Context) context.Context {
	l := logrus.New()
	l.SetOutput(io.Discard)
	l.SetLevel(logrus.DebugLevel)
	l.AddHook(slogHook{b.log})
	return clog.WithLogger(ctx, logrus.NewEntry(l))
}

// slogHook forwards logrus entries to slog at debug level.
type slogHook struct{ log *slog.Logger }

func (slogHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h slogHook) Fire(e *logrus.Entry) error {
	args := make([]any, 0, 2*len(e.Data)+2)
	args = append(args, "component", "containerd-client")
	for k, v := range e.Data {
		args = append(args, k, v)
	}
	h.log.Debug(e.Message, args...)
	return nil
}

// ready answers unavailable, saying why, when containerd is not there.
func (b *Backend) ready(ctx context.Context) error {
	if err := b.Available(ctx); err != nil {
		return api.Errorf(api.ErrUnavailable, "the containerd backend is not available: %v", err)
	}
	return nil
}

// storedName is the long form of a docker reference, as containerd
// stores it ("busybox" -> "docker.io/library/busybox:latest").
func storedName(name string) (string, error) {
	n, err := reference.ParseDockerRef(name)
	if err != nil {
		return "", api.Errorf(api.ErrInvalidArgument, "%q is not a valid image name (want NAME[:TAG] or NAME@DIGEST, in lower case, such as busybox:1.36 or ghcr.io/org/tool:v2): %v", name, err)
	}
	return n.String(), nil
}

// displayName is the familiar form of a stored name that is a docker
// reference in its long form; other names are shown as they are.
func displayName(stored string) string {
	n, err := reference.ParseNormalizedNamed(stored)
	if err != nil || n.String() != stored {
		return stored
	}
	return reference.FamiliarString(n)
}

// lookupImage finds the image name names: by its stored name, or by the
// long form of a docker reference. A missing image is containerd's
// not-found error (errdefs.IsNotFound).
func (b *Backend) lookupImage(ctx context.Context, name string) (client.Image, error) {
	img, err := b.client.GetImage(ctx, name)
	if err == nil || !errdefs.IsNotFound(err) {
		return img, err
	}
	if long, perr := storedName(name); perr == nil && long != name {
		if img, lerr := b.client.GetImage(ctx, long); lerr == nil || !errdefs.IsNotFound(lerr) {
			return img, lerr
		}
	}
	return nil, err
}

// hostImageInfo describes the built-in image.
func hostImageInfo() api.ImageInfo {
	return api.ImageInfo{Name: HostImage, Builtin: true, Platform: platforms.Format(platforms.DefaultSpec())}
}

// describe answers what the API says of an image. Sizes and platforms of
// images whose content is incomplete are left out.
func (b *Backend) describe(ctx context.Context, img client.Image, name string) api.ImageInfo {
	md := img.Metadata()
	out := api.ImageInfo{Name: name, Digest: md.Target.Digest.String(), CreatedAt: md.CreatedAt.UTC()}
	if size, err := img.Size(ctx); err == nil {
		out.Size = size
	}
	if spec, err := img.Spec(ctx); err == nil && spec.OS != "" {
		out.Platform = platforms.Format(spec.Platform)
	}
	return out
}

// Images implements backends.ImageStore: the built-in image, then the
// namespace's images by name.
func (b *Backend) Images(ctx context.Context) ([]api.ImageInfo, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	imgs, err := b.client.ListImages(ctx)
	if err != nil {
		return nil, b.classify("list images", err)
	}
	stored := map[string]bool{}
	for _, img := range imgs {
		stored[img.Name()] = true
	}
	out := make([]api.ImageInfo, 0, len(imgs)+1)
	for _, img := range imgs {
		name := displayName(img.Name())
		// A store that also holds the familiar form as a name of its own
		// (put there by other tools): show the long one as it is.
		if name != img.Name() && (stored[name] || name == HostImage) {
			name = img.Name()
		}
		out = append(out, b.describe(ctx, img, name))
	}
	slices.SortFunc(out, func(x, y api.ImageInfo) int { return strings.Compare(x.Name, y.Name) })
	return append([]api.ImageInfo{hostImageInfo()}, out...), nil
}

// countingReader remembers how much was read and the first read error of
// the request body, so that the body's own failures (too large, a dropped
// connection) are told from the archive's.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}

// unfoldCap bounds a decompressed archive: past max bytes it fails with
// too_large.
type unfoldCap struct {
	r         io.Reader
	left, max int64
}

// unfoldError is the error of an unfoldCap, told from the archive's own.
type unfoldError struct{ err error }

func (e *unfoldError) Error() string { return e.err.Error() }

func (c *unfoldCap) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, err := c.r.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, &unfoldError{api.Errorf(api.ErrTooLarge, "the archive decompresses to more than %d bytes (containerd.max_image_bytes)", c.max)}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// importPrefix names the images of the archive's unnamed manifests while
// an import decides what to call them; they never outlive the import.
const importPrefix = "import.sandboxd.invalid/unnamed-"

// ImportImage implements backends.ImageStore.
//
// The archive's own names are its docker RepoTags, or in an OCI layout
// the io.containerd.image.name annotation or an
// org.opencontainers.image.ref.name annotation that is a full reference
// (a bare tag such as "latest" names nothing). name, when given: an
// archive that names no image must hold one image (for this host's
// platform), which gets the name; an archive that names one image gets
// name as a further name; an archive that names several is refused, and
// the images it added are removed again. An archive that names nothing
// needs a name.
func (b *Backend) ImportImage(ctx context.Context, r io.Reader, name string) (_ []api.ImageInfo, err error) {
	if name == HostImage {
		return nil, api.Errorf(api.ErrInvalidArgument, "%q is the name of the built-in image; choose another name", HostImage)
	}
	var want string
	if name != "" {
		if want, err = storedName(name); err != nil {
			return nil, err
		}
	}
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	ctx = b.quiet(ctx)
	body := &countingReader{r: r}
	// docker save | gzip, and friends: the archive may be compressed.
	archive, err := compression.DecompressStream(body)
	if err != nil {
		if body.err != nil {
			return nil, body.err
		}
		return nil, api.Errorf(api.ErrInvalidArgument, "the upload could not be decompressed: %v", err)
	}
	defer archive.Close()
	var tarStream io.Reader = archive
	if max := b.cfg.MaxImportBytes; max > 0 && archive.GetCompression() != compression.Uncompressed {
		// A small compressed archive must not fill containerd's disk.
		tarStream = &unfoldCap{r: archive, left: max, max: max}
	}
	unfolded := &countingReader{r: tarStream}

	// One lease over the import and the unpacking: nothing is collected
	// half way; the images hold their content afterwards.
	ctx, done, err := b.client.WithLease(ctx)
	if err != nil {
		return nil, b.classify("import an image", err)
	}
	defer done(context.WithoutCancel(ctx))

	tmp := importPrefix + randomHex(6)
	start := time.Now()
	imgs, err := b.client.Import(ctx, unfolded,
		client.WithImageRefTranslator(ociRefName),
		client.WithDigestRef(func(d digest.Digest) string { return tmp + "@" + d.String() }),
		client.WithSkipDigestRef(func(name string) bool { return name != "" }),
	)
	if err != nil {
		return nil, b.importError(ctx, body, unfolded, err)
	}
	is := b.client.ImageService()
	cleanup := context.WithoutCancel(ctx)
	var named, unnamed []images.Image
	for _, img := range imgs {
		if strings.HasPrefix(img.Name, tmp+"@") {
			unnamed = append(unnamed, img)
		} else if !slices.ContainsFunc(named, func(n images.Image) bool { return n.Name == img.Name }) {
			named = append(named, img)
		}
	}
	defer func() {
		for _, img := range unnamed {
			_ = is.Delete(cleanup, img.Name)
		}
	}()
	// fresh reports whether this import made img (rather than giving an
	// existing name a new target): those are removed when it fails.
	fresh := func(img images.Image) bool {
		return img.CreatedAt.Equal(img.UpdatedAt) && img.CreatedAt.After(start.Add(-time.Second))
	}
	removeFresh := func(imgs []images.Image) {
		for _, img := range imgs {
			if fresh(img) {
				_ = is.Delete(cleanup, img.Name)
			}
		}
	}

	var result []images.Image
	switch {
	case len(named) == 0 && len(unnamed) == 0:
		return nil, api.Errorf(api.ErrInvalidArgument, "the archive holds no image")
	case want == "" && len(named) == 0:
		return nil, api.Errorf(api.ErrInvalidArgument, "the archive names no image (no RepoTags, no reference annotation): give it a name (sandboxd image import --name NAME FILE, or ?name=NAME)")
	case want == "":
		result = named
	case len(named) == 0:
		var fit []images.Image
		host := platforms.Default()
		for _, img := range unnamed {
			if p := img.Target.Platform; p == nil || host.Match(*p) {
				fit = append(fit, img)
			}
		}
		switch len(fit) {
		case 0:
			return nil, api.Errorf(api.ErrInvalidArgument, "the archive holds no image for this host's platform (%s)", platforms.DefaultString())
		case 1:
		default:
			return nil, api.Errorf(api.ErrInvalidArgument, "the archive holds %d images and names none: one name cannot name them all; tag them before saving", len(fit))
		}
		img, err := putImage(ctx, is, images.Image{Name: want, Target: fit[0].Target, Labels: fit[0].Labels})
		if err != nil {
			return nil, b.classify("name the imported image", err)
		}
		result = []images.Image{img}
	default:
		targets := map[digest.Digest]bool{}
		var names []string
		for _, img := range named {
			targets[img.Target.Digest] = true
			names = append(names, displayName(img.Name))
		}
		if len(targets) > 1 {
			removeFresh(named)
			return nil, api.Errorf(api.ErrInvalidArgument, "the archive names %d images (%s), so a name cannot say which one it names: import it without a name", len(targets), strings.Join(names, ", "))
		}
		result = named
		if !slices.ContainsFunc(named, func(n images.Image) bool { return n.Name == want }) {
			img, err := putImage(ctx, is, images.Image{Name: want, Target: named[0].Target, Labels: named[0].Labels})
			if err != nil {
				removeFresh(named)
				return nil, b.classify("name the imported image", err)
			}
			result = append(result, img)
		}
	}

	// Unpack, once per image content; an image this host cannot run is
	// not kept.
	out := make([]api.ImageInfo, 0, len(result))
	unpacked := map[digest.Digest]error{}
	for _, md := range result {
		img := client.NewImage(b.client, md)
		uerr, seen := unpacked[md.Target.Digest]
		if !seen {
			uerr = b.unpack(ctx, img)
			unpacked[md.Target.Digest] = uerr
		}
		if uerr != nil {
			removeFresh(result)
			return nil, uerr
		}
		out = append(out, b.describe(ctx, img, displayName(md.Name)))
	}
	return out, nil
}

// putImage points name at the image's target, whether or not it exists.
func putImage(ctx context.Context, is images.Store, img images.Image) (images.Image, error) {
	updated, err := is.Update(ctx, img, "target")
	if err == nil || !errdefs.IsNotFound(err) {
		return updated, err
	}
	return is.Create(ctx, img)
}

// unpack unpacks img into the snapshotter unless it is already.
func (b *Backend) unpack(ctx context.Context, img client.Image) error {
	name := displayName(img.Name())
	if ok, err := img.IsUnpacked(ctx, b.cfg.Snapshotter); err == nil && ok {
		return nil
	}
	err := img.Unpack(ctx, b.cfg.Snapshotter)
	switch {
	case err == nil:
		return nil
	case errdefs.IsNotFound(err):
		// The manifest for this platform, or a layer, is not there.
		return api.Errorf(api.ErrInvalidArgument, "image %s cannot be unpacked on this host (%s): the archive lacks its content for this platform: %v", name, platforms.DefaultString(), errText(err))
	}
	if strings.Contains(err.Error(), "no space left on device") {
		return api.Errorf(api.ErrResourceExhausted, "unpack image %s: containerd has no space left: %v", name, errText(err))
	}
	return b.classify("unpack image "+name, err)
}

// ociRefName translates an OCI layout's org.opencontainers.image.ref.name
// annotation into an image name: a full reference in its stored form; a
// bare tag ("latest", "1.0") names nothing by itself.
func ociRefName(ref string) string {
	if !strings.ContainsAny(ref, "/:@") {
		return ""
	}
	if long, err := storedName(ref); err == nil {
		return long
	}
	return ref
}

// importError classifies a failed import: the body's own failure, then
// containerd's, then the archive's.
func (b *Backend) importError(ctx context.Context, body, unfolded *countingReader, err error) error {
	var capErr *unfoldError
	switch {
	case body.err != nil:
		return body.err
	case errors.As(unfolded.err, &capErr):
		return capErr.err
	case ctx.Err() != nil:
		return fmt.Errorf("import an image: %w", ctx.Err())
	case body.n == 0:
		return api.Errorf(api.ErrInvalidArgument, "the upload is empty: send a docker save or OCI image layout tar")
	case errdefs.IsUnavailable(err) || b.probe(ctx) != nil:
		return b.classify("import an image", err)
	case strings.Contains(err.Error(), "no space left on device"):
		return api.Errorf(api.ErrResourceExhausted, "import an image: containerd has no space left: %v", errText(err))
	case errors.Is(err, images.ErrEmptyWalk):
		return api.Errorf(api.ErrInvalidArgument, "the archive holds no image for this host's platform (%s)", platforms.DefaultString())
	case errors.Is(err, io.ErrUnexpectedEOF) && body.n >= 1024:
		return api.Errorf(api.ErrInvalidArgument, "the archive is truncated: it ends in the middle of an entry (%v)", errText(err))
	case errdefs.IsNotFound(err):
		return api.Errorf(api.ErrInvalidArgument, "the archive is incomplete: it refers to content it does not hold: %v", errText(err))
	case errdefs.IsInternal(err), errdefs.IsUnknown(err), errdefs.IsFailedPrecondition(err), errdefs.IsAborted(err):
		return b.classify("import an image", err)
	}
	return api.Errorf(api.ErrInvalidArgument, "the upload is not a valid image archive (want a docker save tar or an OCI image layout tar, optionally gzip-compressed): %v", errText(err))
}

// RemoveImage implements backends.ImageStore. The image is deleted with
// containerd's synchronous garbage collection: its content and unpacked
// layers that no other image shares are gone when it returns.
func (b *Backend) RemoveImage(ctx context.Context, name string) error {
	if name == HostImage {
		return api.Errorf(api.ErrInvalidArgument, "%q is the built-in image; it cannot be removed", HostImage)
	}
	if name == "" {
		return api.Errorf(api.ErrInvalidArgument, "no image named")
	}
	if err := b.ready(ctx); err != nil {
		return err
	}
	img, err := b.lookupImage(ctx, name)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return api.Errorf(api.ErrNotFound, "image %q is not in containerd's store (namespace %s)", name, b.cfg.Namespace)
		}
		return b.classify("look up image "+name, err)
	}
	stored := img.Name()
	cs, err := b.client.Containers(ctx, fmt.Sprintf("labels.%q==%q,image==%q", labelOwner, b.cfg.Owner, stored))
	if err != nil {
		return b.classify("list the containers of image "+name, err)
	}
	if len(cs) > 0 {
		ids := make([]string, 0, len(cs))
		for _, c := range cs {
			ids = append(ids, c.ID())
		}
		slices.Sort(ids)
		return api.Errorf(api.ErrConflict, "image %s is used by sandbox %s: delete the sandbox first", name, strings.Join(ids, ", "))
	}
	if err := b.client.ImageService().Delete(ctx, stored, images.SynchronousDelete()); err != nil {
		if errdefs.IsNotFound(err) {
			return api.Errorf(api.ErrNotFound, "image %q is not in containerd's store (namespace %s)", name, b.cfg.Namespace)
		}
		return b.classify("remove image "+name, err)
	}
	return nil
}

// PullImage implements backends.ImageStore: containerd's client fetches
// the image for this host's platform from its registry (anonymously; over
// HTTPS, or plain HTTP for localhost) and unpacks it.
func (b *Backend) PullImage(ctx context.Context, ref string) ([]api.ImageInfo, error) {
	if ref == HostImage {
		return nil, api.Errorf(api.ErrInvalidArgument, "%q is the built-in image; it is not pulled", HostImage)
	}
	long, err := storedName(ref)
	if err != nil {
		return nil, err
	}
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	ctx = b.quiet(ctx)
	ctx, done, err := b.client.WithLease(ctx)
	if err != nil {
		return nil, b.classify("pull "+ref, err)
	}
	defer done(context.WithoutCancel(ctx))
	img, err := b.client.Pull(ctx, long, client.WithPullUnpack, client.WithPullSnapshotter(b.cfg.Snapshotter))
	if err != nil {
		return nil, b.pullError(ctx, ref, err)
	}
	return []api.ImageInfo{b.describe(ctx, img, displayName(img.Name()))}, nil
}

// pullError classifies a failed pull: a registry that cannot be reached
// is unavailable, with what to do instead.
func (b *Backend) pullError(ctx context.Context, ref string, err error) error {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var status remoteerrors.ErrUnexpectedStatus
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return api.Errorf(api.ErrDeadlineExceeded, "pull %s: the registry did not answer in time: %v", ref, errText(err))
	case ctx.Err() != nil:
		return fmt.Errorf("pull %s: %w", ref, ctx.Err())
	case errors.As(err, &dnsErr), errors.As(err, &opErr), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, io.ErrUnexpectedEOF):
		return api.Errorf(api.ErrUnavailable, "pull %s: the registry cannot be reached from the daemon's host: %v (pulling needs a reachable registry; without one, save the image to a tar elsewhere and import it: sandboxd image import FILE)", ref, errText(err))
	case errors.As(err, &status):
		switch {
		case status.StatusCode == http.StatusUnauthorized, status.StatusCode == http.StatusForbidden:
			return api.Errorf(api.ErrPermissionDenied, "pull %s: the registry refused access (%s); sandboxd pulls anonymously: import a saved tar instead", ref, status.Status)
		case status.StatusCode == http.StatusNotFound:
			return api.Errorf(api.ErrNotFound, "pull %s: the registry has no such image", ref)
		case status.StatusCode == http.StatusTooManyRequests:
			return api.Errorf(api.ErrResourceExhausted, "pull %s: the registry limits requests (%s); try again later", ref, status.Status)
		}
		return api.Errorf(api.ErrUnavailable, "pull %s: the registry answered %s", ref, status.Status)
	case errdefs.IsNotFound(err):
		return api.Errorf(api.ErrNotFound, "pull %s: the registry has no such image (or it needs credentials, which sandboxd does not send): %v", ref, errText(err))
	}
	return b.classify("pull "+ref, err)
}

func randomHex(n int) string {
	buf := make([]byte, n)
	_, _ = rand.Read(buf)
	return hex.EncodeToString(buf)
}
