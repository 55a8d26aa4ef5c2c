package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// binPath is the real empo2 binary, built once for the CLI tests of this
// package (tests run the binary, as a user would).
var binPath string

func TestMain(m *testing.M) {
	rssHelper() // hardening_test.go: a small process that measures a command's peak RSS
	dir, err := os.MkdirTemp("", "empo2-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binPath = filepath.Join(dir, "empo2")
	if b := os.Getenv("EMPO2_TEST_BINARY"); b != "" {
		// Run the CLI tests against another build (e.g. an older one, to see
		// that a regression test fails on it).
		binPath = b
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	build := exec.Command("go", "build", "-o", binPath, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building empo2 for CLI tests:", err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runCLI runs the empo2 binary with args and returns its stdout, stderr and
// exit error (nil on exit status 0).
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runCLIIn(t, "", args...)
}

// runCLIIn is runCLI in the working directory dir ("": this one).
func runCLIIn(t *testing.T, dir string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(binPath, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

func TestVersion(t *testing.T) {
	out, stderr, err := runCLI(t, "version")
	if err != nil {
		t.Fatalf("empo2 version: %v\n%s", err, stderr)
	}
	if !bytes.Contains([]byte(out), []byte("empo2 ")) {
		t.Fatalf("version output %q lacks the program name", out)
	}
}

func TestBadGlobalFlags(t *testing.T) {
	if _, stderr, err := runCLI(t, "--log-level", "loud", "version"); err == nil {
		t.Fatalf("a bad --log-level was accepted; stderr: %s", stderr)
	}
}

func TestBadBackend(t *testing.T) {
	_, stderr, err := runCLI(t, "--backend", filepath.Join(t.TempDir(), "libggml-missing.so"), "version")
	if err == nil {
		t.Fatal("a missing --backend library was accepted")
	}
	if !bytes.Contains([]byte(stderr), []byte("--backend")) {
		t.Fatalf("error does not name the flag: %s", stderr)
	}
}

// Flags after positional arguments work for every command, required flags
// included (permuteArgs), and a flag's value starting with "-" stays a value.
func TestFlagsAfterArgs(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	if _, stderr, err := runCLI(t, "model", "init", "--out", model); err != nil {
		t.Fatalf("model init: %v\n%s", err, stderr)
	}
	out, stderr, err := runCLI(t, "model", "info", model, "--json")
	if err != nil || !strings.HasPrefix(strings.TrimSpace(out), "{") {
		t.Fatalf("model info FILE --json: %v\n%s\n%s", err, out, stderr)
	}
	jsonl := filepath.Join(dir, "tips.jsonl")
	db := filepath.Join(dir, "mem.db")
	if _, stderr, err := runCLI(t, "memory", "add", "--db", db, "-n", "t/0", "--content", "open the door", "--score", "-5"); err != nil {
		t.Fatalf("memory add with a negative score: %v\n%s", err, stderr)
	}
	if _, stderr, err := runCLI(t, "memory", "export", "--db", db, "--out", jsonl); err != nil {
		t.Fatalf("memory export: %v\n%s", err, stderr)
	}
	out, stderr, err = runCLI(t, "memory", "import", jsonl, "--db", filepath.Join(dir, "copy.db"))
	if err != nil || !strings.Contains(out, "added 1") {
		t.Fatalf("memory import FILE --db: %v\n%s\n%s", err, out, stderr)
	}
	if _, _, err := runCLI(t, "model", "info", model, "--no-such-flag"); err == nil {
		t.Fatal("an unknown flag after the arguments was accepted")
	}
}
