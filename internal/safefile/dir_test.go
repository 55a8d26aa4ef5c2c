package safefile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// writeDir writes the files into a CreateDir(path) and commits it.
func writeDir(t *testing.T, path string, files map[string]string) {
	t.Helper()
	d, err := CreateDir(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Abort()
	for name, data := range files {
		if err := WriteFile(filepath.Join(d.Path(), name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
}

func tree(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	for _, n := range entries(t, dir) {
		out = append(out, n+"="+mustRead(t, filepath.Join(dir, n)))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// TestCreateDirNew: a new folder (and its missing parents) appears whole;
// nothing else is left beside it.
func TestCreateDirNew(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(root, "a", "peft")
	writeDir(t, out, map[string]string{"x.json": "1", "y.bin": "2"})
	if got := tree(t, out); got != "x.json=1 y.bin=2" {
		t.Errorf("folder = %s", got)
	}
	if names := entries(t, filepath.Join(root, "a")); len(names) != 1 {
		t.Errorf("beside the folder: %v", names)
	}
}

// TestCreateDirExisting: into an existing folder the written files are
// replaced, the others (a user's README, .git) stay, the folder keeps its
// inode and no staging folder remains.
func TestCreateDirExisting(t *testing.T) {
	out := t.TempDir()
	mustWrite(t, filepath.Join(out, "x.json"), "old")
	mustWrite(t, filepath.Join(out, "README.md"), "mine")
	before, _ := os.Stat(out)
	writeDir(t, out, map[string]string{"x.json": "new", "y.bin": "2"})
	if got := tree(t, out); got != "README.md=mine x.json=new y.bin=2" {
		t.Errorf("folder = %s", got)
	}
	after, _ := os.Stat(out)
	if !os.SameFile(before, after) {
		t.Error("the folder was replaced by another one")
	}
	// "." works and keeps the working directory valid
	t.Chdir(out)
	writeDir(t, ".", map[string]string{"x.json": "newer"})
	if got := mustRead(t, "x.json"); got != "newer" {
		t.Errorf("x.json = %q", got)
	}
}

// TestCreateDirSymlinkAndFile: a symlink to a folder fills that folder (the
// link stays); a path that is a file is refused (ErrNotDir) and kept.
func TestCreateDirSymlinkAndFile(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink("real", link); err != nil {
		t.Fatal(err)
	}
	writeDir(t, link, map[string]string{"x.json": "1"})
	if got := tree(t, real); got != "x.json=1" {
		t.Errorf("real folder = %s", got)
	}
	if li, _ := os.Lstat(link); li.Mode()&os.ModeSymlink == 0 {
		t.Error("the symlink was replaced")
	}
	file := filepath.Join(root, "file")
	mustWrite(t, file, "keep")
	if _, err := CreateDir(file); !errors.Is(err, ErrNotDir) {
		t.Errorf("CreateDir(file): %v, want ErrNotDir", err)
	}
	if got := mustRead(t, file); got != "keep" {
		t.Errorf("file = %q", got)
	}
	if names := entries(t, root); strings.Join(names, ",") != "file,link,real" {
		t.Errorf("root holds %v", names)
	}
}

// TestCreateDirAbort: an aborted folder leaves no trace, and the existing
// one untouched.
func TestCreateDirAbort(t *testing.T) {
	out := t.TempDir()
	mustWrite(t, filepath.Join(out, "x.json"), "old")
	d, err := CreateDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(d.Path(), "x.json"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Commit after Abort: %v", err)
	}
	if got := tree(t, out); got != "x.json=old" {
		t.Errorf("folder = %s", got)
	}
}

// TestKilledDirWriteKeepsOldFolder: a child killed in the middle of
// writing a folder leaves the old folder as it was; SIGTERM removes the
// staging folder at once, after SIGKILL the next CreateDir does.
func TestKilledDirWriteKeepsOldFolder(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		root := t.TempDir()
		out := filepath.Join(root, "hf")
		writeDir(t, out, map[string]string{"a.txt": "old a", "b.bin": "old b"})
		cmd, rest := startChild(t, "dir", out)
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		io.ReadAll(rest)
		cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != sig {
			t.Errorf("%v: child ended with %v, want death by the signal", sig, cmd.ProcessState)
		}
		// the staging folder of an existing folder is inside it: after
		// SIGKILL the dead writer's is left there until the next write
		names := entries(t, out)
		if sig == syscall.SIGKILL {
			if len(names) != 3 || !strings.HasPrefix(names[0], ".hf.tmp-") {
				t.Errorf("SIGKILL: want the dead writer's staging folder, have %v", names)
			} else {
				names = names[1:]
			}
		}
		if strings.Join(names, ",") != "a.txt,b.bin" || mustRead(t, filepath.Join(out, "a.txt")) != "old a" ||
			mustRead(t, filepath.Join(out, "b.bin")) != "old b" {
			t.Errorf("%v: folder holds %v, want the old a.txt and b.bin", sig, names)
		}
		if names := entries(t, root); len(names) != 1 {
			t.Errorf("%v: beside the folder: %v", sig, names)
		}
		writeDir(t, out, map[string]string{"a.txt": "next"})
		if got := tree(t, out); got != "a.txt=next b.bin=old b" {
			t.Errorf("%v: after the next write: %.60s", sig, got)
		}
	}
}
