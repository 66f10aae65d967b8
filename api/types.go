// Package api holds the wire types of the sandboxd REST API v1 (see
// docs/openapi.yaml): actions, observations, sandboxes, events and errors,
// with the strict decoding and validation every server and client shares.
//
// It depends on the standard library only, so any program can import it to
// speak to a daemon.
package api

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Backend names.
const (
	BackendProcess    = "process"
	BackendContainerd = "containerd"
	BackendWasm       = "wasm"
)

// Sandbox states.
const (
	// StateRunning: the sandbox accepts actions.
	StateRunning = "running"
	// StateLost: the backend could not re-adopt the sandbox after a daemon
	// restart; its files may remain, but nothing runs in it any more.
	StateLost = "lost"
)

// Network modes.
const (
	NetworkNone = "none"
	NetworkHost = "host"
)

// Limits bound what a sandbox may use. Zero means the server's default;
// the server clamps every value to its configured maximum and answers the
// effective limits in the Sandbox.
type Limits struct {
	MemoryMB    int64   `json:"memory_mb"`
	Pids        int64   `json:"pids"`
	CPUs        float64 `json:"cpus"`
	DiskMB      int64   `json:"disk_mb"`
	OutputBytes int64   `json:"output_bytes"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	Backend      string            `json:"backend,omitempty"`
	Image        string            `json:"image,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Workdir      string            `json:"workdir,omitempty"`
	Limits       *Limits           `json:"limits,omitempty"`
	Network      string            `json:"network,omitempty"`
	IdleTimeoutS *float64          `json:"idle_timeout_s,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// Sandbox describes one sandbox.
type Sandbox struct {
	ID           string            `json:"id"`
	Backend      string            `json:"backend"`
	State        string            `json:"state"`
	CreatedAt    time.Time         `json:"created_at"`
	Workdir      string            `json:"workdir"`
	Image        string            `json:"image"`
	Limits       Limits            `json:"limits"`
	Network      string            `json:"network"`
	Labels       map[string]string `json:"labels"`
	IdleTimeoutS float64           `json:"idle_timeout_s"`
	// LastActiveAt is when the sandbox last received an action.
	LastActiveAt time.Time `json:"last_active_at"`
	// Reason says why a lost sandbox is lost.
	Reason string `json:"reason,omitempty"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// Health is the body of GET /v1/health.
type Health struct {
	Status string `json:"status"`
}

// BackendInfo says whether a backend can be used on this host.
type BackendInfo struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	// Features lists what the backend enforces on this host (for example
	// "cgroup-memory", "user-isolation"), so an operator can see what a
	// limit will actually do.
	Features []string `json:"features,omitempty"`
}

// Info is the body of GET /v1/info.
type Info struct {
	Version  string        `json:"version"`
	Backends []BackendInfo `json:"backends"`
	// Sandboxes is the number of sandboxes the daemon holds.
	Sandboxes int `json:"sandboxes"`
	// MaxBodyBytes is the largest action body the daemon accepts.
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// DefaultLimits and MaxLimits are the server's defaults and caps.
	DefaultLimits Limits `json:"default_limits"`
	MaxLimits     Limits `json:"max_limits"`
}

// Event types of the event log.
const (
	EventAction      = "action"
	EventObservation = "observation"
	// EventError records an action the daemon refused or could not run at
	// all (for example a 409 because the session was busy): the action is
	// in the log, and so is why nothing ran.
	EventError = "error"
)

// Event is one record of a sandbox's event log, as GET .../events sends it.
type Event struct {
	Seq         int64        `json:"seq"`
	Time        time.Time    `json:"time"`
	Type        string       `json:"type"`
	Cause       int64        `json:"cause,omitempty"`
	Action      *Action      `json:"action,omitempty"`
	Observation *Observation `json:"observation,omitempty"`
	Error       *ErrorInfo   `json:"error,omitempty"`
}

// Stream line types of an NDJSON action answer.
const (
	LineOutput      = "output"
	LineObservation = "observation"
	LineError       = "error"
)

// Output streams.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamPTY    = "pty"
)

// StreamLine is one line of an NDJSON action answer: output as it arrives,
// then exactly one observation (or, if the action failed after the answer
// had begun, one error).
type StreamLine struct {
	Type   string `json:"type"`
	Stream string `json:"stream,omitempty"`
	// Data is the chunk when it is valid UTF-8; otherwise DataB64 holds it.
	Data    string `json:"data,omitempty"`
	DataB64 []byte `json:"data_b64,omitempty"`
	// Dropped counts output bytes left out of the live stream because the
	// client read slower than the command wrote; the event log still has them.
	Dropped     int64        `json:"dropped,omitempty"`
	Observation *Observation `json:"observation,omitempty"`
	Error       *ErrorInfo   `json:"error,omitempty"`
}

// Bounds on the labels and environment of a sandbox.
const (
	MaxLabels     = 64
	MaxLabelBytes = 256
	MaxEnvVars    = 1024
	MaxEnvBytes   = 128 << 10
)

// DecodeCreateSandbox parses and validates the body of POST /v1/sandboxes.
// An empty body asks for a sandbox with every default.
func DecodeCreateSandbox(data []byte) (*CreateSandboxRequest, error) {
	var r CreateSandboxRequest
	if len(bytes.TrimSpace(data)) == 0 {
		return &r, nil
	}
	if !utf8.Valid(data) {
		return nil, Errorf(ErrInvalidArgument, "the request body is not valid UTF-8")
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

// Validate checks what does not depend on the server's configuration.
func (r *CreateSandboxRequest) Validate() error {
	switch r.Network {
	case "", NetworkNone, NetworkHost:
	default:
		return Errorf(ErrInvalidArgument, "field \"network\" must be %q or %q, not %q", NetworkNone, NetworkHost, r.Network)
	}
	if r.IdleTimeoutS != nil {
		if v := *r.IdleTimeoutS; math.IsNaN(v) || v < 0 {
			return Errorf(ErrInvalidArgument, "field \"idle_timeout_s\" must be a number of seconds >= 0, not %v", v)
		}
	}
	if l := r.Limits; l != nil {
		for _, f := range []struct {
			name string
			v    float64
		}{{"memory_mb", float64(l.MemoryMB)}, {"pids", float64(l.Pids)}, {"cpus", l.CPUs}, {"disk_mb", float64(l.DiskMB)}, {"output_bytes", float64(l.OutputBytes)}} {
			if f.v < 0 || math.IsNaN(f.v) {
				return Errorf(ErrInvalidArgument, "field \"limits.%s\" must be >= 0, not %v", f.name, f.v)
			}
		}
	}
	if len(r.Env) > MaxEnvVars {
		return Errorf(ErrInvalidArgument, "field \"env\" has more than %d variables", MaxEnvVars)
	}
	size := 0
	for k, v := range r.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return Errorf(ErrInvalidArgument, "field \"env\" has an invalid variable %q (names are non-empty without '=' or NUL; values without NUL)", k)
		}
		size += len(k) + len(v)
	}
	if size > MaxEnvBytes {
		return Errorf(ErrInvalidArgument, "field \"env\" is larger than %d bytes", MaxEnvBytes)
	}
	if len(r.Labels) > MaxLabels {
		return Errorf(ErrInvalidArgument, "field \"labels\" has more than %d labels", MaxLabels)
	}
	for k, v := range r.Labels {
		if k == "" || len(k) > MaxLabelBytes || len(v) > MaxLabelBytes {
			return Errorf(ErrInvalidArgument, "field \"labels\" has an invalid label %q (keys 1-%d bytes, values up to %d)", k, MaxLabelBytes, MaxLabelBytes)
		}
	}
	if strings.IndexByte(r.Image, 0) >= 0 || strings.IndexByte(r.Workdir, 0) >= 0 || strings.IndexByte(r.Backend, 0) >= 0 {
		return Errorf(ErrInvalidArgument, "fields \"backend\", \"image\" and \"workdir\" must not contain NUL")
	}
	return nil
}

// TransferResult is the answer to PUT /v1/sandboxes/{id}/files.
type TransferResult struct {
	// Path is the file or directory written, as the sandbox sees it.
	Path  string `json:"path"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
}
