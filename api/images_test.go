package api_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

func TestDecodePullImage(t *testing.T) {
	r, err := api.DecodePullImage([]byte(`{"ref": "alpine:3.20"}`))
	if err != nil || r.Ref != "alpine:3.20" {
		t.Fatalf("got %+v, %v", r, err)
	}
	for body, want := range map[string]string{
		``:                        "empty",
		`{}`:                      `"ref" is required`,
		`{"ref": ""}`:             `"ref" is required`,
		`{"ref": "a b"}`:          "white space",
		`{"ref": "host"}`:         "built-in",
		`{"ref": "x", "tag": 1}`:  "unknown field",
		`{"ref": 1}`:              "must be a string",
		`{"ref": "x"} {}`:         "after its JSON object",
		"{\"ref\": \"\xff\"}":     "UTF-8",
		`[]`:                      "JSON object",
		`{"ref": "x\u0000y"}`:     "NUL",
		`{"ref": "alpine"` + "\n": "not valid JSON",
	} {
		_, err := api.DecodePullImage([]byte(body))
		if !errors.Is(err, api.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodePullImage(%q) = %v, want invalid_argument saying %q", body, err, want)
		}
	}
}

func TestImageInfoJSON(t *testing.T) {
	for _, tc := range []struct {
		img  api.ImageInfo
		want string
	}{
		{api.ImageInfo{Name: "host", Platform: "linux/amd64", Builtin: true},
			`{"name":"host","size":0,"platform":"linux/amd64","builtin":true}`},
		{api.ImageInfo{Name: "busybox:1", Digest: "sha256:ab", Size: 42, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Platform: "linux/arm64/v8"},
			`{"name":"busybox:1","digest":"sha256:ab","size":42,"created_at":"2026-01-02T03:04:05Z","platform":"linux/arm64/v8"}`},
	} {
		b, err := json.Marshal(api.ImageList{Images: []api.ImageInfo{tc.img}})
		if err != nil || string(b) != `{"images":[`+tc.want+`]}` {
			t.Errorf("got %s, %v; want %s", b, err, tc.want)
		}
		var back api.ImageList
		if err := json.Unmarshal(b, &back); err != nil || len(back.Images) != 1 || back.Images[0] != tc.img {
			t.Errorf("round trip: %+v, %v", back, err)
		}
	}
}
