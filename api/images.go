package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"
)

// HostImage is the built-in image of the containerd backend: the host's
// system, read-only. It needs no import and cannot be removed.
const HostImage = "host"

// ImageInfo is one image sandboxes can be created from (containerd
// backend). (api.Image is an image an ipython cell produced.)
type ImageInfo struct {
	// Name is what a create request's "image" names it by: a docker
	// reference in its familiar form ("busybox:1.36", "ghcr.io/o/x:tag"),
	// or "host". The long form ("docker.io/library/busybox:1.36") names
	// the same image.
	Name string `json:"name"`
	// Digest is the digest of the image's manifest (or index); empty for
	// the built-in image.
	Digest string `json:"digest,omitempty"`
	// Size is the size in bytes of the image's content as stored
	// (compressed layers, config and manifest for this host's platform).
	Size int64 `json:"size"`
	// CreatedAt is when the image entered the daemon's image store
	// (imported or pulled); absent for the built-in image.
	CreatedAt time.Time `json:"created_at,omitzero"`
	// Platform is the image's OS/architecture[/variant], "linux/amd64".
	Platform string `json:"platform,omitempty"`
	// Builtin marks the built-in "host" image.
	Builtin bool `json:"builtin,omitempty"`
}

// ImageList is the body of GET /v1/images, and the answer of an import
// (POST /v1/images) or a pull (POST /v1/images/pull): the images it
// stored.
type ImageList struct {
	Images []ImageInfo `json:"images"`
}

// PullImageRequest is the body of POST /v1/images/pull.
type PullImageRequest struct {
	// Ref is the image to pull: a docker reference ("alpine:3.20",
	// "ghcr.io/o/x:tag", "name@sha256:...").
	Ref string `json:"ref"`
}

// DecodePullImage parses and validates the body of POST /v1/images/pull.
func DecodePullImage(data []byte) (*PullImageRequest, error) {
	var r PullImageRequest
	if !utf8.Valid(data) {
		return nil, Errorf(ErrInvalidArgument, "the request body is not valid UTF-8")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, Errorf(ErrInvalidArgument, "the request body is empty; want {\"ref\": \"NAME[:TAG]\"}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, jsonError("request body", err)
	}
	if rest := bytes.TrimSpace(data[dec.InputOffset():]); len(rest) > 0 {
		return nil, Errorf(ErrInvalidArgument, "the request body has data after its JSON object")
	}
	return &r, r.Validate()
}

// Validate checks the request.
func (r *PullImageRequest) Validate() error {
	switch {
	case strings.TrimSpace(r.Ref) == "":
		return Errorf(ErrInvalidArgument, "field \"ref\" is required: the image to pull, such as \"alpine:3.20\"")
	case strings.ContainsAny(r.Ref, "\x00 \t\n"):
		return Errorf(ErrInvalidArgument, "field \"ref\" %q has white space or NUL", r.Ref)
	case r.Ref == HostImage:
		return Errorf(ErrInvalidArgument, "%q is the built-in image; it is not pulled", HostImage)
	}
	return nil
}
