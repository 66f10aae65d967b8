package tests

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// ohPost sends an OpenHands runtime request to the sandbox's endpoint,
// authenticated the way OpenHands does (X-Session-API-Key).
func ohDo(t *testing.T, d *daemon, method, path, contentType string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+d.tcp+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Session-API-Key", d.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	hc := &http.Client{Timeout: 2 * time.Minute}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// match checks got against want: objects field by field (extra fields in
// got are fine), strings exactly or, written "re:...", by regexp.
func match(path string, got, want any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: got %v, want an object", path, got)}
		}
		var errs []string
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				errs = append(errs, fmt.Sprintf("%s.%s: missing", path, k))
				continue
			}
			errs = append(errs, match(path+"."+k, gv, wv)...)
		}
		return errs
	case string:
		g, ok := got.(string)
		if re, isRE := strings.CutPrefix(w, "re:"); isRE {
			if !ok || !regexp.MustCompile(re).MatchString(g) {
				return []string{fmt.Sprintf("%s: got %q, want a match of %q", path, got, re)}
			}
			return nil
		}
		if !ok || g != w {
			return []string{fmt.Sprintf("%s: got %q, want %q", path, got, w)}
		}
		return nil
	default:
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if !bytes.Equal(gb, wb) {
			return []string{fmt.Sprintf("%s: got %s, want %s", path, gb, wb)}
		}
		return nil
	}
}

// TestOpenHandsEndpoint replays OpenHands-shaped requests (written from
// OpenHands' action and observation event format, in
// testdata/openhands) against a sandbox's OpenHands endpoint: the agent
// task (create a file, run its failing test, fix it, rerun, read the
// result) and the other action kinds, then the file endpoints.
func TestOpenHandsEndpoint(t *testing.T) {
	requireIPykernel(t)
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)
	base := "/openhands/" + id
	if status, body := ohDo(t, d, "GET", base+"/alive", "", nil); status != 200 || strings.TrimSpace(string(body)) != `{"status":"ok"}` {
		t.Fatalf("alive: %d %s", status, body)
	}
	// The key is required.
	req, _ := http.NewRequest("POST", "http://"+d.tcp+base+"/execute_action", strings.NewReader(`{}`))
	req.Header.Set("X-Session-API-Key", "wrong-key-wrong-key")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("wrong key: %v %v", resp, err)
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "openhands", "agent_task.json"))
	if err != nil {
		t.Fatal(err)
	}
	var steps []struct {
		Name    string
		Request json.RawMessage
		Expect  map[string]any
	}
	if err := json.Unmarshal(raw, &steps); err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		status, body := ohDo(t, d, "POST", base+"/execute_action", "application/json", bytes.NewReader(st.Request))
		var got map[string]any
		if err := json.Unmarshal(body, &got); status != 200 || err != nil {
			t.Fatalf("%s: %d %s", st.Name, status, body)
		}
		for _, e := range match("", got, st.Expect) {
			t.Errorf("%s: %s", st.Name, e)
		}
	}

	// list_files: directories first, with a slash.
	wantRun(t, run(t, c, id, "mkdir -p pkg/sub && touch pkg/b.txt pkg/a.txt"), 0, "")
	if status, body := ohDo(t, d, "POST", base+"/list_files", "application/json", strings.NewReader(`{"path":"pkg"}`)); status != 200 || strings.TrimSpace(string(body)) != `["sub/","a.txt","b.txt"]` {
		t.Errorf("list_files: %d %s", status, body)
	}
	if status, body := ohDo(t, d, "POST", base+"/list_files", "application/json", strings.NewReader(`{"path":"calc.py"}`)); status != 200 || strings.TrimSpace(string(body)) != `[]` {
		t.Errorf("list_files of a file: %d %s", status, body)
	}
	// upload_file: a file, and a zip extracted (recursive).
	upload := func(dest, name string, content []byte, recursive bool) (int, []byte) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, _ := mw.CreateFormFile("file", name)
		fw.Write(content)
		mw.WriteField("destination", dest)
		mw.WriteField("recursive", fmt.Sprint(recursive))
		mw.Close()
		return ohDo(t, d, "POST", base+"/upload_file", mw.FormDataContentType(), &buf)
	}
	if status, body := upload("up", "notes.txt", []byte("uploaded\n"), false); status != 200 {
		t.Fatalf("upload_file: %d %s", status, body)
	}
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	w, _ := zw.Create("proj/main.py")
	w.Write([]byte("print('zip')\n"))
	zw.Close()
	if status, body := upload("unzipped", "proj.zip", zbuf.Bytes(), true); status != 200 {
		t.Fatalf("upload_file recursive: %d %s", status, body)
	}
	wantRun(t, run(t, c, id, "cat up/notes.txt && python3 unzipped/proj/main.py"), 0, "uploaded\nzip\n")
	// A zip entry that climbs out is refused, and nothing is extracted.
	zbuf.Reset()
	zw = zip.NewWriter(&zbuf)
	w, _ = zw.Create("../../escape.txt")
	w.Write([]byte("x"))
	zw.Close()
	if status, _ := upload("evil", "evil.zip", zbuf.Bytes(), true); status != 403 {
		t.Errorf("zip with ../: %d, want 403", status)
	}
	// download_files: a directory as a zip.
	status, body := ohDo(t, d, "GET", base+"/download_files?path=unzipped", "", nil)
	if status != 200 {
		t.Fatalf("download_files: %d %s", status, body)
	}
	zr, err := zip.NewReader(bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "proj/main.py") {
		t.Errorf("download_files: %v", names)
	}
	// The default sandbox is made on first use and kept.
	status, body = ohDo(t, d, "POST", "/openhands/default/execute_action", "application/json", strings.NewReader(`{"action":{"id":1,"action":"run","args":{"command":"echo default > mark"}}}`))
	if status != 200 || !strings.Contains(string(body), `"exit_code":0`) {
		t.Fatalf("default sandbox: %d %s", status, body)
	}
	status, body = ohDo(t, d, "POST", "/openhands/default/execute_action", "application/json", strings.NewReader(`{"action":{"id":2,"action":"read","args":{"path":"mark"}}}`))
	if status != 200 || !strings.Contains(string(body), `"content":"default\n"`) {
		t.Fatalf("default sandbox, again: %d %s", status, body)
	}
}
