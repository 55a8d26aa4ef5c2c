package safefile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// entries lists dir's names (fails the test on error).
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWriteFile: a new file gets its content and perm less the umask; a
// replaced file keeps its mode and inode-independent content is the new
// one; no temporary file remains.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.json")
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	if err := WriteFile(p, []byte("one"), 0o666); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, p); got != "one" || fi.Mode().Perm() != 0o644 {
		t.Errorf("new file: %q mode %v, want \"one\" 0644", got, fi.Mode().Perm())
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, _ = os.Stat(p)
	if got := mustRead(t, p); got != "two" || fi.Mode().Perm() != 0o600 {
		t.Errorf("replaced file: %q mode %v, want \"two\" 0600 (the mode it had)", got, fi.Mode().Perm())
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("directory holds %v, want a.json alone", names)
	}
}

// TestCreateRefusesNonFiles: ".", a directory, "out/", a path in a folder
// that does not exist and one under a regular file are refused before
// anything is created; "." used to leave a stray "..tmp" behind.
func TestCreateRefusesNonFiles(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	mustWrite(t, "file", "keep")
	if err := os.Mkdir("sub", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		want error
		text string
	}{
		{".", ErrNotFile, "directory"},
		{"..", ErrNotFile, "directory"},
		{"sub", ErrNotFile, "directory"},
		{dir, ErrNotFile, "directory"},
		{"new/", ErrNotFile, "directory"},
		{"", ErrNotFile, "empty"},
		{"missing/x.json", fs.ErrNotExist, "folder missing does not exist"},
		{"file/x.json", syscall.ENOTDIR, "not a directory"},
	} {
		err := WriteFile(c.path, []byte("x"), 0o644)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("WriteFile(%q): %v, want %v containing %q", c.path, err, c.want, c.text)
		}
	}
	if names := entries(t, dir); strings.Join(names, ",") != "file,sub" {
		t.Errorf("refused writes left %v", names)
	}
	if names := entries(t, "sub"); len(names) != 0 {
		t.Errorf("refused writes left %v in sub", names)
	}
	if got := mustRead(t, "file"); got != "keep" {
		t.Errorf("file = %q", got)
	}
}

// TestSymlinks: writing through a symlink replaces the file it points to
// (the link stays a link); a dangling link creates its target, as os.Create
// would.
func TestSymlinks(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.txt")
	mustWrite(t, real, "old")
	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink("real.txt", link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if li, _ := os.Lstat(link); li.Mode()&fs.ModeSymlink == 0 {
		t.Error("the symlink was replaced by a file")
	}
	if got := mustRead(t, real); got != "new" {
		t.Errorf("target = %q, want new", got)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink("sub/../made.txt", dangling); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(dangling, []byte("made"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(dir, "made.txt")); got != "made" {
		t.Errorf("dangling link's target = %q", got)
	}
}

// TestDevices: an existing device is written in place (not replaced), and
// its write errors are the underlying ones.
func TestDevices(t *testing.T) {
	if err := WriteFile(os.DevNull, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(os.DevNull); err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		t.Fatalf("%s is no longer a character device: %v %v", os.DevNull, fi.Mode(), err)
	}
	if _, err := os.Stat("/dev/full"); err == nil {
		err := WriteFile("/dev/full", []byte("x"), 0o644)
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "/dev/full") {
			t.Errorf("writing /dev/full: %v, want ENOSPC naming the path", err)
		}
	}
}

// TestFailedWritesLeaveTarget: a failing write function, Abort, and a
// second Commit leave the old file and no temporary file; errors name the
// target (not the temporary file) and keep their cause.
func TestFailedWritesLeaveTarget(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.bin")
	mustWrite(t, p, "old")
	boom := errors.New("boom")
	if err := WriteFunc(p, 0o644, func(w io.Writer) error {
		w.Write([]byte("partial"))
		return boom
	}); err != boom {
		t.Errorf("WriteFunc returned %v, want the write function's error", err)
	}
	f, err := Create(p, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("partial"))
	if err := f.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := f.Abort(); err != nil {
		t.Errorf("second Abort: %v", err)
	}
	if err := f.Commit(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Commit after Abort: %v, want os.ErrClosed", err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Write after Abort: %v, want os.ErrClosed", err)
	}
	if got := mustRead(t, p); got != "old" {
		t.Errorf("target = %q after failed writes", got)
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("failed writes left %v", names)
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		err := WriteFile(filepath.Join(ro, "x.json"), []byte("x"), 0o644)
		if !errors.Is(err, fs.ErrPermission) || strings.Contains(err.Error(), ".tmp-") || !strings.Contains(err.Error(), "x.json") {
			t.Errorf("read-only folder: %v, want a permission error naming x.json", err)
		}
	}
}

// TestLongName: a target name close to NAME_MAX still gets a temporary file.
func TestLongName(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, strings.Repeat("n", 250))
	if err := WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, p); got != "x" {
		t.Errorf("got %q", got)
	}
}

const childEnv = "EMPO2_SAFEFILE_CHILD"

// childWriter is the body of the writing child processes: it writes
// slowly through Create (or CreateDir, mode "dir") and prints "writing"
// once a write is in progress.
func childWriter(mode, path string) {
	slow := func(w io.Writer) {
		buf := bytes.Repeat([]byte("new "), 1<<12)
		for i := 0; i < 200; i++ {
			if _, err := w.Write(buf); err != nil {
				fmt.Println("error", err)
				os.Exit(3)
			}
			if i == 2 {
				fmt.Println("writing")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var err error
	switch mode {
	case "keep": // a program that handles the signals itself
		SetSignalCleanup(false)
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		fallthrough
	case "file":
		var f *File
		if f, err = Create(path, 0o644); err == nil {
			slow(f)
			err = f.Commit()
		}
	case "dir":
		var d *Dir
		if d, err = CreateDir(path); err == nil {
			if err = WriteFile(filepath.Join(d.Path(), "a.txt"), []byte("new a"), 0o644); err == nil {
				var f *File
				if f, err = Create(filepath.Join(d.Path(), "b.bin"), 0o644); err == nil {
					slow(f)
					if err = f.Commit(); err == nil {
						err = d.Commit()
					}
				}
			}
		}
	}
	fmt.Println("finished", err)
	os.Exit(5) // not reached when a signal kills the process
}

// TestChild is the writing child of the crash tests (skipped otherwise).
func TestChild(t *testing.T) {
	mode, path, ok := strings.Cut(os.Getenv(childEnv), ":")
	if !ok {
		t.Skip("the child process of the crash tests")
	}
	childWriter(mode, path)
}

// startChild starts this test binary as a writing child and returns once
// it writes.
func startChild(t *testing.T, mode, path string) (*exec.Cmd, io.Reader) {
	t.Helper()
	return startTestChild(t, "TestChild", childEnv+"="+mode+":"+path, "writing")
}

// startTestChild runs the test named test of this binary as a child
// process with the extra environment variable env, and returns once the
// child has printed the line ready, with its stdout for the rest (the
// test fails if the child ends first).
func startTestChild(t *testing.T, test, env, ready string) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == ready {
			return cmd, out
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	t.Fatalf("child %s ended before %q", test, ready)
	return nil, nil
}

// TestKilledWriteKeepsOldFile: a child killed (SIGKILL) in the middle of a
// write leaves the old file byte-identical; its temporary file is removed
// by the next write to the path; SIGTERM and SIGINT remove the temporary
// file at once and the child dies by the signal.
func TestKilledWriteKeepsOldFile(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT} {
		dir := t.TempDir()
		p := filepath.Join(dir, "data.jsonl")
		mustWrite(t, p, "old content\n")
		cmd, out := startChild(t, "file", p)
		if names := entries(t, dir); len(names) != 2 {
			t.Fatalf("%v: want the file and one temporary file while writing, have %v", sig, names)
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(out)
		cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != sig {
			t.Errorf("%v: child ended with %v (%s), want death by the signal", sig, cmd.ProcessState, rest)
		}
		if got := mustRead(t, p); got != "old content\n" {
			t.Errorf("%v: the file is %d bytes %.20q…, want the old content", sig, len(got), got)
		}
		left := len(entries(t, dir)) - 1
		if sig != syscall.SIGKILL && left != 0 {
			t.Errorf("%v: temporary file left: %v", sig, entries(t, dir))
		}
		if sig == syscall.SIGKILL && left != 1 {
			t.Errorf("SIGKILL: want the dead writer's temporary file, have %v", entries(t, dir))
		}
		if err := WriteFile(p, []byte("next\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if names := entries(t, dir); len(names) != 1 || mustRead(t, p) != "next\n" {
			t.Errorf("%v: after the next write: %v", sig, names)
		}
	}
}

// TestSignalCleanupOff: with SetSignalCleanup(false) (a program that
// handles SIGTERM itself to finish its work, like empo2 train), a signal
// during a write does not remove the temporary file from under it: the
// file is completed and renamed into place.
func TestSignalCleanupOff(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "data.jsonl")
	mustWrite(t, p, "old content\n")
	cmd, out := startChild(t, "keep", p)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	cmd.Wait()
	if !strings.Contains(string(rest), "finished <nil>") {
		t.Fatalf("the write did not complete after SIGTERM: %s", rest)
	}
	if got := mustRead(t, p); !strings.HasPrefix(got, "new new") || len(got) != 200*4<<12 {
		t.Errorf("the file has %d bytes, want the complete new content", len(got))
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("left %v", names)
	}
}

// TestStaleTemps: the next write to a path removes the temporary files and
// staging folders its dead writers left; those of live processes, of other
// paths and of other naming stay.
func TestStaleTemps(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip("no `true` to get a dead pid:", err)
	}
	deadPID := dead.Process.Pid
	old := time.Now().Add(-2 * time.Hour)
	files := map[string]bool{ // name -> survives
		fmt.Sprintf(".m.gguf.tmp-%d-123456", deadPID):  false,
		".m.gguf.tmp-987654":                           false, // older naming, two hours old
		fmt.Sprintf(".m.gguf.tmp-%d-42", os.Getppid()): true,  // a live process
		fmt.Sprintf(".other.gguf.tmp-%d-1", deadPID):   true,
		fmt.Sprintf(".m.gguf.tmp-%d-12x", deadPID):     true, // not our naming
		"m.gguf.tmp-1-1":                               true,
	}
	for name := range files {
		p := filepath.Join(dir, name)
		mustWrite(t, p, "partial")
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	stage := fmt.Sprintf(".m.gguf.tmp-%d-77", deadPID)
	if err := os.MkdirAll(filepath.Join(dir, stage, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	files[stage] = false
	if err := WriteFile(filepath.Join(dir, "m.gguf"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, keep := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if keep != (err == nil) {
			t.Errorf("%s: exists %v, want %v", name, err == nil, keep)
		}
	}
}
