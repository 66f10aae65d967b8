// Command wasmguest is the WASI module the wasm backend's tests run. The
// tests build it with GOOS=wasip1 GOARCH=wasm; argv[1] picks what it does.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Println("hello from wasm")
		return
	}
	switch os.Args[1] {
	case "args":
		fmt.Println(strings.Join(os.Args[1:], "|"))
	case "env":
		env := os.Environ()
		sort.Strings(env)
		fmt.Println(strings.Join(env, "\n"))
	case "files":
		// Write, read back, list: relative and absolute paths.
		if err := os.WriteFile("/workspace/out.txt", []byte("written by wasm\n"), 0o644); err != nil {
			fail(err)
		}
		if err := os.MkdirAll("sub/dir", 0o755); err != nil {
			fail(err)
		}
		if err := os.WriteFile("sub/dir/rel.txt", []byte("relative\n"), 0o644); err != nil {
			fail(err)
		}
		b, err := os.ReadFile("in.txt")
		if err != nil {
			fail(err)
		}
		fmt.Print(string(b))
		ents, _ := os.ReadDir("/workspace")
		for _, e := range ents {
			fmt.Println(e.Name())
		}
	case "exit":
		code, _ := strconv.Atoi(os.Args[2])
		os.Exit(code)
	case "sleep":
		// One host call that lasts: a deadline must end it.
		time.Sleep(time.Hour)
	case "loop":
		for i := 0; ; i++ {
			if i < 0 {
				fmt.Println(i)
			}
		}
	case "alloc":
		var keep [][]byte
		for {
			b := make([]byte, 16<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1 // touch every page: resident, not just reserved
			}
			keep = append(keep, b)
		}
	case "flood":
		n, _ := strconv.Atoi(os.Args[2])
		w := bufio.NewWriterSize(os.Stdout, 1<<16)
		line := strings.Repeat("x", 99) + "\n"
		for i := 0; i < n; i += len(line) {
			w.WriteString(line)
		}
		w.Flush()
	case "escape":
		// Every attempt must fail; print what each one gave.
		for _, p := range os.Args[2:] {
			if b, err := os.ReadFile(p); err != nil {
				fmt.Printf("%s: denied\n", p)
			} else {
				fmt.Printf("%s: READ %d bytes\n", p, len(b))
			}
		}
		if err := os.Symlink("/", "/workspace/rootlink"); err == nil {
			if _, err := os.ReadFile("/workspace/rootlink/etc/passwd"); err != nil {
				fmt.Println("rootlink: denied")
			} else {
				fmt.Println("rootlink: READ")
			}
		}
	case "stdin":
		b, _ := io.ReadAll(os.Stdin)
		fmt.Print(strings.ToUpper(string(b)))
	case "stderr":
		fmt.Fprintln(os.Stderr, "to stderr")
		os.Exit(7)
	default:
		fail(fmt.Errorf("unknown mode %q", os.Args[1]))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "wasmguest:", err)
	os.Exit(1)
}
