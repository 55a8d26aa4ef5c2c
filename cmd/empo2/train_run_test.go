package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/empo2/empo2/modelgen"
)

// quick: a short textlab run on the tiny model (2 × 2 episodes, 3 env
// steps, 6-token actions, one thread).
var quick = []string{"--threads", "1", "--set", "batch.rollouts=2", "--set", "rollout.max_action_tokens=6", "--set", "rollout.step_limit=3"}

func trainArgs(model, dir string, extra ...string) []string {
	a := append([]string{"train", "--preset", "grpo", "-m", model, "--env", "textlab", "--tasks", "melt,light-bulb", "--run-dir", dir}, quick...)
	return append(a, extra...)
}

func sameTree(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	var diff []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			diff = append(diff, "removed "+k)
		} else if w != v {
			diff = append(diff, "changed "+k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			diff = append(diff, "added "+k)
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Errorf("%s changed the directory: %s", what, strings.Join(diff, ", "))
	}
}

// TestTrainSetTakesValueWhole: --set values are taken whole (a YAML flow
// list with commas, prose with commas), not cut at commas.
func TestTrainSetTakesValueWhole(t *testing.T) {
	out, stderr, err := runCLI(t, "train", "--print-config", "--set", "tasks=[melt, light-bulb]",
		"--set", "rollout.system=You are an agent, act well.")
	if err != nil || !strings.Contains(out, "tasks: [melt, light-bulb]") || !strings.Contains(out, "system: You are an agent, act well.") {
		t.Fatalf("--set with commas: %v %s\n%s", err, stderr, out)
	}
	out, stderr, err = runCLI(t, "train", "--print-config", "--scienceworld-jar", "/x/sw.jar", "--data", "/x/data")
	if err != nil || !strings.Contains(out, "jar: /x/sw.jar") || !strings.Contains(out, "data_dir: /x/data") {
		t.Fatalf("--scienceworld-jar and --data: %v %s\n%s", err, stderr, out)
	}
}

// TestTrainRefusesForeignDirectory: train never writes into, or empties, a
// directory it did not make a run in: a directory holding a user's memory
// database and metrics (no run marker), a run directory whose config.yaml
// was deleted, a directory with other files. A failed setup in a new
// directory leaves nothing behind.
func TestTrainRefusesForeignDirectory(t *testing.T) {
	model := trainModel(t)
	root := t.TempDir()

	// a user's own memory database and metrics, no run
	user := filepath.Join(root, "user")
	os.MkdirAll(user, 0o755)
	if _, stderr, err := runCLI(t, "memory", "add", "--db", filepath.Join(user, "memory.db"), "-n", "melt/0", "--content", "my tip"); err != nil {
		t.Fatalf("memory add: %v %s", err, stderr)
	}
	os.WriteFile(filepath.Join(user, "metrics.jsonl"), []byte(`{"step":1}`+"\n"), 0o644)
	before := snapshot(t, user)
	for _, args := range [][]string{
		trainArgs(filepath.Join(root, "missing.gguf"), user),
		trainArgs(model, user, "--set", "memory.embedder="+filepath.Join(root, "missing-embedder.gguf")),
		trainArgs(model, user, "--steps", "1"),
	} {
		_, stderr, err := runCLI(t, args...)
		if err == nil || !strings.Contains(stderr, "memory.db") {
			t.Errorf("%v: want a refusal naming memory.db, got %v %s", args[len(args)-4:], err, stderr)
		}
		sameTree(t, "train in a directory with a user's memory.db", before, snapshot(t, user))
	}

	// a run whose config.yaml was deleted is not an empty directory
	run := filepath.Join(root, "run")
	if _, stderr, err := runCLI(t, trainArgs(model, run, "--steps", "2")...); err != nil {
		t.Fatalf("train: %v %s", err, stderr)
	}
	os.Remove(filepath.Join(run, "config.yaml"))
	before = snapshot(t, run)
	if _, stderr, err := runCLI(t, trainArgs(model, run, "--steps", "1")...); err == nil {
		t.Errorf("a new run over a run without config.yaml was accepted: %s", stderr)
	}
	sameTree(t, "train over a run without config.yaml", before, snapshot(t, run))
	if _, stderr, err := runCLI(t, "train", "--run-dir", run, "--resume", "--steps", "3", "--threads", "1"); err == nil || !strings.Contains(stderr, "config.yaml") {
		t.Errorf("--resume without config.yaml: %v %s", err, stderr)
	}
	sameTree(t, "--resume of a run without config.yaml", before, snapshot(t, run))

	// any other file: refused too
	other := filepath.Join(root, "other")
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, "notes.txt"), []byte("mine"), 0o644)
	before = snapshot(t, other)
	if _, stderr, err := runCLI(t, trainArgs(model, other, "--steps", "1")...); err == nil || !strings.Contains(stderr, "notes.txt") {
		t.Errorf("a directory with notes.txt: %v %s", err, stderr)
	}
	sameTree(t, "train in a directory with notes.txt", before, snapshot(t, other))

	// a failed setup leaves no run directory behind (an existing empty one
	// stays, empty), so the same command can be repeated
	fresh := filepath.Join(root, "fresh")
	if _, _, err := runCLI(t, trainArgs(filepath.Join(root, "missing.gguf"), fresh)...); err == nil {
		t.Fatal("missing model accepted")
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("a failed setup left %s behind: %v %v", fresh, err, snapshot(t, fresh))
	}
	empty := filepath.Join(root, "empty")
	os.MkdirAll(empty, 0o755)
	if _, _, err := runCLI(t, trainArgs(model, empty, "--set", "memory.embedder=/nonexistent/e.gguf")...); err == nil {
		t.Fatal("missing embedder accepted")
	}
	if s := snapshot(t, empty); len(s) != 1 {
		t.Errorf("a failed setup left files in an empty directory: %v", s)
	}
}

// TestTrainMissingJar: a missing ScienceWorld jar is one clear error before
// anything is created.
func TestTrainMissingJar(t *testing.T) {
	model := trainModel(t)
	dir := filepath.Join(t.TempDir(), "sw")
	_, stderr, err := runCLI(t, "train", "-m", model, "--env", "scienceworld", "--scienceworld-jar", filepath.Join(t.TempDir(), "none.jar"),
		"--run-dir", dir, "--threads", "1")
	if err == nil || strings.Count(stderr, "jar not found") != 1 {
		t.Fatalf("want one missing-jar error, got %v:\n%s", err, stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the failed start left %s: %v", dir, err)
	}
}

// TestTrainSecondProcessRefused: while a train runs in a directory, a
// second train (--resume or not) there is refused; after the first is
// killed with SIGKILL the lock is gone and --resume works.
func TestTrainSecondProcessRefused(t *testing.T) {
	model := trainModel(t)
	dir := filepath.Join(t.TempDir(), "r")
	cmd := exec.Command(binPath, trainArgs(model, dir, "--steps", "1000")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(120 * time.Second)
	for {
		if b, _ := os.ReadFile(filepath.Join(dir, "checkpoints", "latest")); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint after 120 s: %s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, args := range [][]string{
		{"train", "--run-dir", dir, "--resume", "--threads", "1"},
		trainArgs(model, dir, "--steps", "2"),
	} {
		_, errOut, err := runCLI(t, args...)
		if err == nil || !strings.Contains(errOut, "in use") {
			t.Errorf("second train on a live run: %v %s", err, errOut)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	// one step past the last checkpoint, however far the killed run got
	// (on an idle machine it passes step 3 while the refusals above run)
	b, err := os.ReadFile(filepath.Join(dir, "checkpoints", "latest"))
	if err != nil {
		t.Fatal(err)
	}
	var last int
	if _, err := fmt.Sscanf(strings.TrimSpace(filepath.Base(string(b))), "step-%d", &last); err != nil {
		t.Fatalf("checkpoints/latest %q: %v", b, err)
	}
	out, errOut, err := runCLI(t, "train", "--run-dir", dir, "--resume", "--steps", strconv.Itoa(last+1), "--threads", "1")
	if err != nil {
		t.Fatalf("resume after kill -9: %v %s %s", err, out, errOut)
	}
}

// TestTrainResumeValidatesFirst: a --resume that cannot run changes
// nothing (config.yaml included): fewer steps than done, an adapter of
// another shape, a missing embedder, another model. The model path is
// stored absolute, and its size and content hash are checked on resume.
func TestTrainResumeValidatesFirst(t *testing.T) {
	root := t.TempDir()
	model := trainModel(t)
	os.Rename(model, filepath.Join(root, "m.gguf"))
	dir := filepath.Join(root, "r")
	// relative -m, from root
	args := trainArgs("m.gguf", "r", "--steps", "3")
	if _, stderr, err := runCLIIn(t, root, args...); err != nil {
		t.Fatalf("train: %v %s", err, stderr)
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if !strings.Contains(string(cfg), "model: "+filepath.Join(root, "m.gguf")) {
		t.Fatalf("config.yaml does not hold the model's absolute path:\n%s", cfg)
	}
	before := snapshot(t, dir)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--steps", "2"}, "steps"},
		{[]string{"--set", "lora.alpha=1"}, "lora.alpha"},
		{[]string{"--set", "memory.embedder=" + filepath.Join(root, "none.gguf")}, "none.gguf"},
		{[]string{"-m", filepath.Join(root, "other.gguf")}, "model"},
		{[]string{"--seed", "9"}, "seed"},
	} {
		a := append([]string{"train", "--run-dir", dir, "--resume", "--threads", "1"}, tc.args...)
		_, stderr, err := runCLI(t, a...)
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("--resume %v: want an error naming %s, got %v %s", tc.args, tc.want, err, stderr)
		}
		sameTree(t, "failed --resume "+strings.Join(tc.args, " "), before, snapshot(t, dir))
	}
	// from another directory holding a different m.gguf: the run's own model
	elsewhere := filepath.Join(root, "elsewhere")
	os.MkdirAll(elsewhere, 0o755)
	cfgGen := modelgen.DefaultConfig()
	cfgGen.Seed = 99
	if err := modelgen.Write(filepath.Join(elsewhere, "m.gguf"), cfgGen); err != nil {
		t.Fatal(err)
	}
	if out, stderr, err := runCLIIn(t, elsewhere, "train", "--run-dir", dir, "--resume", "--steps", "4", "--threads", "1"); err != nil || !strings.Contains(out, "4..4") {
		t.Fatalf("resume from another directory: %v %s %s", err, out, stderr)
	}
	// the model file replaced by another one: refused, naming it
	os.Rename(filepath.Join(elsewhere, "m.gguf"), filepath.Join(root, "m.gguf"))
	before = snapshot(t, dir)
	_, stderr, err := runCLI(t, "train", "--run-dir", dir, "--resume", "--steps", "5", "--threads", "1")
	if err == nil || !strings.Contains(stderr, filepath.Join(root, "m.gguf")) || !strings.Contains(stderr, "changed") {
		t.Errorf("resume with a replaced model: %v %s", err, stderr)
	}
	sameTree(t, "--resume with a replaced model", before, snapshot(t, dir))
}

// TestTrainContextTooSmall: a context that cannot hold the first prompt is
// an error before the run starts, with the prompt's length and the context.
func TestTrainContextTooSmall(t *testing.T) {
	model := trainModel(t)
	dir := filepath.Join(t.TempDir(), "r")
	_, stderr, err := runCLI(t, trainArgs(model, dir, "--steps", "1", "--set", "context=64")...)
	if err == nil || !strings.Contains(stderr, "context 64") || !strings.Contains(stderr, "prompt") {
		t.Fatalf("context 64: %v %s", err, stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the failed start left %s: %v", dir, err)
	}
}

// TestTrainSaysWhenNothingLearned: a fresh tiny model never scores on
// textlab, so every group has equal scores and no update runs; the run
// says so, why, and what to do.
func TestTrainSaysWhenNothingLearned(t *testing.T) {
	model := trainModel(t)
	dir := filepath.Join(t.TempDir(), "r")
	out, stderr, err := runCLI(t, trainArgs(model, dir, "--steps", "1")...)
	if err != nil {
		t.Fatalf("train: %v %s", err, stderr)
	}
	all := out + stderr
	for _, want := range []string{"0 updates", "equal scores", "empo2 sft", "batch.rollouts"} {
		if !strings.Contains(all, want) {
			t.Errorf("output lacks %q:\n%s", want, all)
		}
	}
}
