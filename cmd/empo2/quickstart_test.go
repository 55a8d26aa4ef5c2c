package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/empo2/empo2/runfiles"
)

// quickstart's reduced variant (--size smoke) end to end: stopped after a
// stage (--until, as an interrupt between stages), continued (the finished
// stages skipped), the outputs and the summary; run again, nothing redone;
// a directory it did not make is refused untouched.
func TestQuickstartResume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "qs")
	out, stderr, err := runCLI(t, "quickstart", dir, "--size", "smoke", "--threads", "1", "--until", "sft")
	if err != nil {
		t.Fatalf("quickstart --until sft: %v\n%s\n%s", err, out, stderr)
	}
	if !strings.Contains(out, "stopped after sft") {
		t.Fatalf("no stop message:\n%s", out)
	}
	for _, st := range []string{"demos", "model", "sft"} {
		if _, err := os.Stat(filepath.Join(dir, qsDoneDir, st)); err != nil {
			t.Errorf("stage %s not marked done: %v", st, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "run")); err == nil {
		t.Fatal("the train stage ran despite --until sft")
	}
	sftInfo, err := os.Stat(filepath.Join(dir, "sft.gguf"))
	if err != nil {
		t.Fatal(err)
	}

	out, stderr, err = runCLI(t, "quickstart", dir, "--size", "smoke", "--threads", "1")
	if err != nil {
		t.Fatalf("quickstart (continued): %v\n%s\n%s", err, out, stderr)
	}
	for _, want := range []string{"continuing in", "[1/6] demos: done before, skipped", "[3/6] sft: done before, skipped",
		"$ empo2 train --preset empo2", "$ empo2 eval --run", "quickstart finished", "report/report.html", "after EMPO², memory on"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "sft.gguf")); err != nil || !fi.ModTime().Equal(sftInfo.ModTime()) {
		t.Errorf("the finished SFT was redone: %v", err)
	}
	for _, f := range []string{"demos.jsonl", "model.gguf", "run/" + runfiles.MetricsFile, "eval-warmstart.json", "eval-run.json", "report/report.html", QuickstartFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	if last, _, err := lastMetrics(filepath.Join(dir, "run")); err != nil || last.Step != 2 {
		t.Errorf("run's last step %d, %v: want 2", last.Step, err)
	}
	rr, err := readEval(filepath.Join(dir, "eval-run.json"))
	if err != nil || rr.MemoryOff == nil || rr.MemoryOn == nil {
		t.Errorf("eval-run.json: %+v, %v: want memory off and on", rr, err)
	}
	if strings.Contains(runOrFatal(t, "report", "--help"), "--serve") && !strings.Contains(out, "live page: http://127.0.0.1:") {
		t.Errorf("report --serve exists but no live page was served:\n%s", out)
	}

	// all done: nothing runs again, the summary is printed
	out, stderr, err = runCLI(t, "quickstart", dir, "--size", "smoke", "--threads", "1", "--no-serve")
	if err != nil || strings.Contains(out, "$ empo2") || !strings.Contains(out, "quickstart finished") {
		t.Errorf("third run: %v\n%s\n%s", err, out, stderr)
	}

	// a directory quickstart did not make
	foreign := t.TempDir()
	os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644)
	if _, stderr, err = runCLI(t, "quickstart", foreign, "--size", "smoke"); err == nil || !strings.Contains(stderr, "quickstart did not make it") {
		t.Errorf("foreign directory: %v %s", err, stderr)
	}
	if ents, _ := os.ReadDir(foreign); len(ents) != 1 {
		t.Errorf("the foreign directory was changed: %d entries", len(ents))
	}
}

// SIGINT while the run trains: train checkpoints, quickstart stops with the
// interrupt's status and says how to continue; run again, the run is
// resumed (train --resume) and the quickstart finishes.
func TestQuickstartInterruptedTrainResumes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "qs")
	if out, stderr, err := runCLI(t, "quickstart", dir, "--size", "smoke", "--threads", "1", "--until", "sft"); err != nil {
		t.Fatalf("quickstart --until sft: %v\n%s\n%s", err, out, stderr)
	}
	var outb, errb bytes.Buffer
	cmd := exec.Command(binPath, "quickstart", dir, "--size", "smoke", "--threads", "1", "--no-serve")
	cmd.Stdout, cmd.Stderr = &outb, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "run", runfiles.RunFile)
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if err == nil {
		t.Skipf("the run finished before the interrupt reached it (a fast machine):\n%s", outb.String())
	}
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGINT) || !strings.Contains(errb.String(), "quickstart interrupted in stage train") {
		t.Fatalf("interrupted quickstart: %v\n%s\n%s", err, outb.String(), errb.String())
	}
	if _, err := os.Stat(filepath.Join(dir, qsDoneDir, "train")); err == nil {
		t.Fatal("an interrupted train stage was marked done")
	}
	out, stderr, err := runCLI(t, "quickstart", dir, "--size", "smoke", "--threads", "1", "--no-serve")
	if err != nil {
		t.Fatalf("quickstart after the interrupt: %v\n%s\n%s", err, out, stderr)
	}
	if !strings.Contains(out, "--resume") || !strings.Contains(out, "quickstart finished") {
		t.Errorf("the run was not resumed:\n%s", out)
	}
	if last, _, err := lastMetrics(filepath.Join(dir, "run")); err != nil || last.Step != 2 {
		t.Errorf("run's last step %d, %v: want 2", last.Step, err)
	}
}

func runOrFatal(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stderr)
	}
	return out + stderr
}
