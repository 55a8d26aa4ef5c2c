package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/empo2/empo2/modelgen"
)

// trainModel writes the generated tiny model with a 2048-token context:
// the first prompts of every textlab task fit (some exceed 512 tokens).
func trainModel(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tiny.gguf")
	cfg := modelgen.DefaultConfig()
	cfg.Ctx = 2048
	if err := modelgen.Write(p, cfg); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTrainCLI: print-config, strict errors, a short run, resume, SIGTERM.
func TestTrainCLI(t *testing.T) {
	out, stderr, err := runCLI(t, "train", "--preset", "grpo", "--set", "batch.tasks=3", "--print-config")
	if err != nil || !strings.Contains(out, "memory_prob: 0\n") || !strings.Contains(out, "tasks: 3") || !strings.Contains(out, "# q = P(off-policy | memory)") {
		t.Fatalf("--print-config: %v %s\n%s", err, stderr, out)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfgFile, []byte("steps: 2\nbatch:\n  taks: 3\n"), 0o644)
	if _, stderr, err = runCLI(t, "train", "--config", cfgFile, "--run-dir", filepath.Join(dir, "x")); err == nil || !strings.Contains(stderr, "line 3") || !strings.Contains(stderr, "taks") {
		t.Fatalf("unknown key: %v %s", err, stderr)
	}
	if _, stderr, err = runCLI(t, "train", "--preset", "nope", "--print-config"); err == nil || !strings.Contains(stderr, "memory-only") {
		t.Fatalf("unknown preset: %v %s", err, stderr)
	}
	model := trainModel(t)
	run := filepath.Join(dir, "r")
	common := []string{"--threads", "1", "--set", "batch.rollouts=2", "--set", "rollout.max_action_tokens=6"}
	if _, stderr, err = runCLI(t, append([]string{"train", "--preset", "empo2", "-m", model, "--env", "textlab", "--run-dir", run, "--steps", "2", "--tasks", "melt,light-bulb"}, common...)...); err != nil {
		t.Fatalf("train: %v\n%s", err, stderr)
	}
	if _, stderr, err = runCLI(t, "train", "-m", model, "--run-dir", run, "--steps", "3"); err == nil || !strings.Contains(stderr, "--resume") {
		t.Fatalf("second run in the same dir: %v %s", err, stderr)
	}
	if _, stderr, err = runCLI(t, "train", "--run-dir", run, "--resume", "--seed", "9"); err == nil {
		t.Fatalf("--resume changed the seed: %s", stderr)
	}
	out, stderr, err = runCLI(t, "train", "--run-dir", run, "--resume", "--steps", "3", "--threads", "1")
	if err != nil || !strings.Contains(out, "trained steps 3..3") {
		t.Fatalf("resume: %v %s %s", err, out, stderr)
	}
	b, _ := os.ReadFile(filepath.Join(run, "metrics.jsonl"))
	if n := strings.Count(string(b), "\n"); n != 3 {
		t.Fatalf("%d metrics lines after resume", n)
	}
	// a finished run resumed says there is nothing to do (issue 38), and
	// --steps 0 is refused
	out, stderr, err = runCLI(t, "train", "--run-dir", run, "--resume", "--threads", "1")
	if err != nil || !strings.Contains(out, "nothing to train") || !strings.Contains(out, "--steps N (N > 3)") {
		t.Fatalf("resume of a finished run: %v %s %s", err, out, stderr)
	}
	if _, stderr, err = runCLI(t, "train", "-m", model, "--run-dir", filepath.Join(dir, "zero"), "--steps", "0"); err == nil || !strings.Contains(stderr, "steps 0: nothing to train") {
		t.Fatalf("--steps 0: %v %s", err, stderr)
	}
	// SIGTERM: checkpoint and exit 0
	run2 := filepath.Join(dir, "r2")
	cmd := exec.Command(binPath, append([]string{"train", "--preset", "grpo", "-m", model, "--run-dir", run2, "--steps", "1000"}, common...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, _ := os.ReadFile(filepath.Join(run2, "metrics.jsonl")); len(b) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: exit %v", err)
	}
	if _, err := os.Stat(filepath.Join(run2, "checkpoints", "latest")); err != nil {
		t.Fatalf("no checkpoint after SIGTERM: %v", err)
	}
}
