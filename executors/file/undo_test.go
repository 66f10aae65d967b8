package file_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/executors/file"
)

func TestUndoEachKind(t *testing.T) {
	cases := []struct {
		name    string
		initial *string // nil: the file does not exist before
		edit    *api.Action
		mode    os.FileMode // of the initial file
	}{
		{name: "str_replace", initial: sp("a\nfoo\nb\n"), edit: replace("f.txt", sp("foo"), sp("bar")), mode: 0o640},
		{name: "str_replace crlf", initial: sp("a\r\nfoo\r\n"), edit: replace("f.txt", sp("a\nfoo"), sp("x\ny\nz")), mode: 0o644},
		{name: "str_replace deletion", initial: sp("a\nfoo\nb"), edit: replace("f.txt", sp("foo\n"), nil), mode: 0o600},
		{name: "insert", initial: sp("a\nb\n"), edit: insert("f.txt", ip(1), sp("x")), mode: 0o755},
		{name: "insert no final newline", initial: sp("a\nb"), edit: insert("f.txt", ip(2), sp("x")), mode: 0o644},
		{name: "write", initial: sp("old\n"), edit: write("f.txt", sp("new\n"), ""), mode: 0o640},
		{name: "write with mode", initial: sp("old\n"), edit: write("f.txt", sp("new\n"), "0600"), mode: 0o755},
		{name: "write latin-1", initial: sp("caf\xe9\n"), edit: write("f.txt", sp("x"), ""), mode: 0o644},
		{name: "write new file", initial: nil, edit: write("f.txt", sp("new\n"), "")},
		{name: "write new file with parents", initial: nil, edit: write("d/e/f.txt", sp("new\n"), "")},
		{name: "create", initial: nil, edit: create("f.txt", sp("made\n"))},
		{name: "create with parents", initial: nil, edit: create("p/q/f.txt", sp("made\n"))},
		{name: "create empty", initial: nil, edit: create("f.txt", sp(""))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.put("other.txt", "other\n")
			p := tc.edit.Path
			if tc.initial != nil {
				e.put(p, *tc.initial)
				if err := os.Chmod(e.host(p), tc.mode); err != nil {
					t.Fatal(err)
				}
			}
			e.mustDo(tc.edit)
			obs, err := e.do(undo(p))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(obs.Output, "Last edit to /workspace/"+p+" undone successfully") {
				t.Errorf("output %q", obs.Output)
			}
			if tc.initial == nil {
				if e.exists(p) {
					t.Errorf("undo of the edit that created %s left it (%q)", p, e.get(p))
				}
			} else {
				sameBytes(t, "restored", e.get(p), *tc.initial)
				if got := perm(t, e.host(p)); got != tc.mode {
					t.Errorf("restored mode %v, want %v", got, tc.mode)
				}
				if strings.Contains(obs.Output, "\r") {
					t.Errorf("output holds a carriage return: %q", obs.Output)
				}
			}
			sameBytes(t, "other file", e.get("other.txt"), "other\n")
			noTemps(t, e.dir)
			// Nothing more to undo.
			_, err = e.do(undo(p))
			wantErr(t, err, api.ErrInvalidArgument, "no edit")
		})
	}
}

func TestUndoNoHistory(t *testing.T) {
	e := newEnv(t)
	e.put("f.txt", "x\n")
	e.mustDo(read("f.txt"))
	e.mustDo(viewA("f.txt"))
	for _, p := range []string{"f.txt", "missing.txt"} {
		_, err := e.do(undo(p))
		wantErr(t, err, api.ErrInvalidArgument, "no edit")
	}
	// Failed edits leave nothing to undo either.
	for _, a := range []*api.Action{
		replace("f.txt", sp("nope"), sp("y")),
		insert("f.txt", ip(9), sp("y")),
		create("f.txt", sp("y")),
		write("f.txt", sp("y"), "999"),
	} {
		_, err := e.do(a)
		wantErr(t, err, api.ErrInvalidArgument)
		_, err = e.do(undo("f.txt"))
		wantErr(t, err, api.ErrInvalidArgument, "no edit")
	}
	sameBytes(t, "file", e.get("f.txt"), "x\n")
}

// Several edits of one file, of every kind, undone one by one, restore
// each previous content exactly.
func TestUndoChain(t *testing.T) {
	e := newEnv(t)
	edits := []*api.Action{
		create("f.txt", sp("one\ntwo\n")),
		replace("f.txt", sp("one"), sp("ONE")),
		insert("f.txt", ip(2), sp("three")),
		write("f.txt", sp("rewritten\r\nwith crlf\r\n"), "0600"),
		replace("f.txt", sp("with crlf"), sp("with\ncrlf")),
		insert("f.txt", ip(0), sp("top")),
		write("f.txt", sp(""), ""),
		write("f.txt", sp("caf\xe9"), "0755"),
		replace("f.txt", sp("caf"), sp("CAF")),
	}
	type state struct {
		content string
		mode    os.FileMode
		exists  bool
	}
	var states []state
	snap := func() state {
		if !e.exists("f.txt") {
			return state{}
		}
		return state{e.get("f.txt"), perm(t, e.host("f.txt")), true}
	}
	for _, a := range edits {
		states = append(states, snap())
		e.mustDo(a)
	}
	for i := len(edits) - 1; i >= 0; i-- {
		e.mustDo(undo("f.txt"))
		got, want := snap(), states[i]
		if got != want {
			t.Fatalf("after undoing edit %d (%s %s): %+v, want %+v", i, edits[i].Kind, edits[i].Command, got, want)
		}
	}
	_, err := e.do(undo("f.txt"))
	wantErr(t, err, api.ErrInvalidArgument)
	if e.exists("f.txt") {
		t.Error("the file is back")
	}
}

// Histories are per file; undoing one leaves the other alone. A link and
// the file it names share one history.
func TestUndoPerFile(t *testing.T) {
	e := newEnv(t)
	e.put("a.txt", "a0\n")
	e.put("b.txt", "b0\n")
	e.symlink("a.txt", "alink")
	e.mustDo(replace("a.txt", sp("a0"), sp("a1")))
	e.mustDo(replace("b.txt", sp("b0"), sp("b1")))
	e.mustDo(replace("alink", sp("a1"), sp("a2")))
	e.mustDo(replace("b.txt", sp("b1"), sp("b2")))

	e.mustDo(undo("b.txt"))
	sameBytes(t, "a", e.get("a.txt"), "a2\n")
	sameBytes(t, "b", e.get("b.txt"), "b1\n")
	e.mustDo(undo("a.txt")) // the edit made through the link
	sameBytes(t, "a", e.get("a.txt"), "a1\n")
	sameBytes(t, "b", e.get("b.txt"), "b1\n")
	e.mustDo(undo("/workspace/alink"))
	sameBytes(t, "a", e.get("a.txt"), "a0\n")
	isLink(t, e.host("alink"), "a.txt")
	_, err := e.do(undo("a.txt"))
	wantErr(t, err, api.ErrInvalidArgument)
	e.mustDo(undo("b.txt"))
	sameBytes(t, "b", e.get("b.txt"), "b0\n")
	_, err = e.do(undo("b.txt"))
	wantErr(t, err, api.ErrInvalidArgument)
	// Two executors (two sandboxes) do not share history.
	e2 := newEnvAt(t, e.dir, file.DefaultConfig(), -1, -1)
	e.mustDo(replace("a.txt", sp("a0"), sp("a9")))
	_, err = e2.do(undo("a.txt"))
	wantErr(t, err, api.ErrInvalidArgument)
}

func TestUndoDepth(t *testing.T) {
	for _, depth := range []int{1, 2, 5} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			cfg := file.DefaultConfig()
			cfg.HistoryDepth = depth
			e := newEnvCfg(t, cfg, -1, -1)
			e.put("f.txt", "v0\n")
			e.put("g.txt", "g0\n")
			e.mustDo(replace("g.txt", sp("g0"), sp("g1")))
			for i := 1; i <= depth+2; i++ {
				e.mustDo(write("f.txt", sp(fmt.Sprintf("v%d\n", i)), ""))
			}
			for i := depth + 1; i >= 2; i-- {
				e.mustDo(undo("f.txt"))
				sameBytes(t, "after undo", e.get("f.txt"), fmt.Sprintf("v%d\n", i))
			}
			_, err := e.do(undo("f.txt"))
			wantErr(t, err, api.ErrInvalidArgument, "no edit")
			sameBytes(t, "after the refused undo", e.get("f.txt"), "v2\n")
			// g's history is its own.
			e.mustDo(undo("g.txt"))
			sameBytes(t, "g", e.get("g.txt"), "g0\n")
		})
	}
}

// HistoryBytes bounds the memory of all histories: the oldest versions go
// first, and what is left still undoes exactly.
func TestUndoHistoryBytes(t *testing.T) {
	cfg := file.DefaultConfig()
	// Each version costs its content plus 64 bytes of bookkeeping: 94
	// bytes for these, so 300 bytes keep three of them.
	cfg.HistoryBytes = 300
	e := newEnvCfg(t, cfg, -1, -1)
	v := func(i int) string { return fmt.Sprintf("%02d", i) + strings.Repeat("x", 28) } // 30 bytes
	e.put("f.txt", v(0))
	for i := 1; i <= 6; i++ {
		e.mustDo(write("f.txt", sp(v(i)), ""))
	}
	// 6 versions were remembered; the budget keeps the last 3.
	for i := 5; i >= 3; i-- {
		e.mustDo(undo("f.txt"))
		sameBytes(t, "after undo", e.get("f.txt"), v(i))
	}
	_, err := e.do(undo("f.txt"))
	wantErr(t, err, api.ErrInvalidArgument)
	sameBytes(t, "after the refused undo", e.get("f.txt"), v(3))
}

// A file too large to keep a copy of is edited without one; undo_edit must
// then not claim to revert "the last edit" by restoring an older version.
func TestUndoAfterUnrememberedEdit(t *testing.T) {
	cfg := file.DefaultConfig()
	cfg.MaxEditBytes = 64
	e := newEnvCfg(t, cfg, -1, -1)
	big := strings.Repeat("B", 100)
	e.put("f.txt", "v0\n")
	e.mustDo(write("f.txt", sp("small\n"), "")) // remembers v0
	e.mustDo(write("f.txt", sp(big), ""))       // remembers "small"
	e.mustDo(write("f.txt", sp("latest\n"), ""))
	// The last edit replaced big: nothing remembered it.
	_, err := e.do(undo("f.txt"))
	if err == nil {
		if got := e.get("f.txt"); got != big {
			t.Fatalf("BUG (regression): undo_edit after a file.write over a file larger than MaxEditBytes restores an older version (%q), silently reverting two edits and losing %q", got, "latest\n")
		}
		return
	}
	wantErr(t, err, api.ErrInvalidArgument)
	sameBytes(t, "file after a refused undo", e.get("f.txt"), "latest\n")
}

// HistoryDepth bounds create's history entries too: the file removed by
// the sandbox, then created again.
func TestUndoDepthCreate(t *testing.T) {
	cfg := file.DefaultConfig()
	cfg.HistoryDepth = 1
	e := newEnvCfg(t, cfg, -1, -1)
	for range 3 {
		e.mustDo(create("f.txt", sp("x\n")))
		if err := os.Remove(e.host("f.txt")); err != nil { // the sandbox's rm
			t.Fatal(err)
		}
	}
	e.mustDo(create("f.txt", sp("x\n")))
	undos := 0
	for ; undos < 10; undos++ {
		if _, err := e.do(undo("f.txt")); err != nil {
			break
		}
	}
	if undos > cfg.HistoryDepth {
		t.Fatalf("BUG (regression): create appends to the undo history without the HistoryDepth bound: %d undos succeeded with HistoryDepth %d", undos, cfg.HistoryDepth)
	}
}

// Undo reverts to the remembered version even when the sandbox changed
// the file meanwhile, and recreates it if the sandbox removed it.
func TestUndoAfterOutsideChange(t *testing.T) {
	e := newEnv(t)
	e.put("f.txt", "orig\n")
	e.mustDo(replace("f.txt", sp("orig"), sp("edited")))
	e.put("f.txt", "changed by the sandbox\n")
	e.mustDo(undo("f.txt"))
	sameBytes(t, "restored", e.get("f.txt"), "orig\n")

	e.mustDo(replace("f.txt", sp("orig"), sp("edited")))
	if err := os.Remove(e.host("f.txt")); err != nil {
		t.Fatal(err)
	}
	e.mustDo(undo("f.txt"))
	sameBytes(t, "recreated", e.get("f.txt"), "orig\n")
}
