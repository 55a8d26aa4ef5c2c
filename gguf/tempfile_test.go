package gguf

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const tempChildEnv = "EMPO2_GGUF_TEMP_CHILD"

// TestInterruptedWriteRemovesTemp: a process writing a GGUF through
// WriteFile and interrupted by SIGTERM or SIGINT leaves no temporary file
// and dies by that signal; the target path is untouched.
func TestInterruptedWriteRemovesTemp(t *testing.T) {
	if path := os.Getenv(tempChildEnv); path != "" {
		w := NewWriter()
		w.AddKV("general.architecture", "test")
		_ = w.AddTensorFunc("slow", []uint64{1 << 20}, TypeF32, func(out io.Writer) error {
			buf := make([]byte, 1<<16)
			for i := 0; i < 64; i++ {
				if _, err := out.Write(buf); err != nil {
					return err
				}
				if i == 4 {
					fmt.Println("writing")
				}
				time.Sleep(50 * time.Millisecond)
			}
			return nil
		})
		if os.Getenv(tempChildEnv+"_KEEP") != "" {
			// A program that handles the signals itself (empo2 train).
			SetSignalCleanup(false)
			signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		}
		err := w.WriteFile(path)
		fmt.Println("finished", err)
		os.Exit(5) // not reached when the signal kills the process
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		dir := t.TempDir()
		path := filepath.Join(dir, "m.gguf")
		cmd, out := startWriter(t, tempChildEnv+"="+path)
		if tmps := temps(t, dir); len(tmps) != 1 {
			t.Fatalf("%v: want one temporary file while writing, have %v", sig, tmps)
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(out)
		werr := cmd.Wait()
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != sig {
			t.Errorf("%v: child ended with %v (%s), want death by the signal", sig, werr, rest)
		}
		if tmps := temps(t, dir); len(tmps) != 0 {
			t.Errorf("%v: temporary files left: %v", sig, tmps)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%v: the target exists after an interrupted write", sig)
		}
	}
}

func temps(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestSignalCleanupOff: with SetSignalCleanup(false) (a program that
// handles SIGTERM itself to finish its work, like empo2 train's checkpoint
// on SIGTERM), a signal during WriteFile does not remove the temporary file
// from under the write: the file is completed and renamed into place.
func TestSignalCleanupOff(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.gguf")
	cmd, out := startWriter(t, tempChildEnv+"="+path, tempChildEnv+"_KEEP=1")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	_ = cmd.Wait()
	if !strings.Contains(string(rest), "finished <nil>") {
		t.Fatalf("the write did not complete after SIGTERM: %s", rest)
	}
	if _, err := Open(path); err != nil {
		t.Fatalf("written file: %v", err)
	}
	if tmps := temps(t, dir); len(tmps) != 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
}

// startWriter starts this test binary as the writing child of
// TestInterruptedWriteRemovesTemp with the extra environment env and
// returns once the child has printed "writing" (a write is in progress),
// with the child's stdout for the rest of its output.
func startWriter(t *testing.T, env ...string) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestInterruptedWriteRemovesTemp$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "writing" {
	}
	return cmd, out
}
