package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Regression tests of issue 38 through the binary: outputs that would land
// inside a run directory or over the command's own configuration file,
// existing outputs replaced without --force, and an adapter given as the
// model.

// fakeRun is a run directory as train leaves it, for the output guard: the
// marker, config.yaml, metrics and a checkpoint's files.
func fakeRun(t *testing.T, dir string) {
	t.Helper()
	writeTinyRun(t, dir, 1)
	ck := filepath.Join(dir, "checkpoints", "step-000003")
	require.NoError(t, os.MkdirAll(ck, 0o755))
	for name, body := range map[string]string{"run.json": "{}", "checkpoints/latest": "step-000003\n",
		"checkpoints/step-000003/adapter.gguf": "adapter", "checkpoints/step-000003/state.gguf": "state"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
}

// §1: eval --run R refuses every output inside R (its adapter, config,
// metrics, state), and no command writes inside a run it does not own;
// eval and sft refuse to write over their --config (and sft's checkpoint
// too). Every refusal leaves the folder byte-identical.
func TestOutputsNeverInsideARunOrOverTheConfig(t *testing.T) {
	model := llmTestModel(t)
	dir := t.TempDir()
	fakeRun(t, filepath.Join(dir, "r"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d.jsonl"), []byte(`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}]}`+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ecfg.yaml"), []byte("eval:\n  episodes: 1\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "scfg.yaml"), []byte("epochs: 1\n"), 0o644))
	eval := []string{"eval", "--run", "r", "-m", model}
	for _, o := range []string{"r/checkpoints/step-000003/adapter.gguf", "r/config.yaml", "r/metrics.jsonl", "r/checkpoints/step-000003/state.gguf", "r/new.json"} {
		wantRefused(t, dir, []string{"out " + o + " lies inside the training run directory " + filepath.Join(dir, "r"), "write it outside the run"},
			append(eval, "-o", o)...)
	}
	sft := []string{"sft", "-m", model, "--data", "d.jsonl"}
	wantRefused(t, dir, []string{"out r/a.gguf lies inside the training run directory"}, append(sft, "-o", "r/a.gguf")...)
	wantRefused(t, dir, []string{"--out r/cmp lies inside the training run directory"}, "report", "r", "--out", "r/cmp")
	wantRefused(t, dir, []string{"out ecfg.yaml would overwrite the input --config ecfg.yaml"}, "eval", "-m", model, "--config", "ecfg.yaml", "-o", "ecfg.yaml")
	wantRefused(t, dir, []string{"out scfg.yaml would overwrite the input --config scfg.yaml"}, append(sft, "--config", "scfg.yaml", "-o", "scfg.yaml")...)
	wantRefused(t, dir, []string{"checkpoint scfg.yaml would overwrite the input --config scfg.yaml"},
		append(sft, "--config", "scfg.yaml", "-o", "a.gguf", "--checkpoint", "scfg.yaml")...)
}

// §2: an existing output the command did not write is refused, named, with
// the one flag that replaces it (--force): export --format peft, report,
// sft, model init; with --force it is replaced.
func TestExistingOutputsNeedForce(t *testing.T) {
	model := llmTestModel(t)
	dir := t.TempDir()
	loraTinyModel(t, dir, "base.gguf", nil)
	_, stderr, err := runCLIIn(t, dir, "lora", "init", "--model", "base.gguf", "--rank", "2", "--out", "a.gguf")
	require.NoError(t, err, stderr)
	writeTinyRun(t, filepath.Join(dir, "r"), 1)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "peft"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "rep"), 0o755))
	for name, body := range map[string]string{"peft/adapter_config.json": "mine", "rep/report.html": "mine", "mine.gguf": "mine",
		"d.jsonl": `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}]}` + "\n"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	force := "give --force to replace it"
	wantRefused(t, dir, []string{"--out peft/adapter_config.json exists", force}, "export", "--format", "peft", "--model", "base.gguf", "--lora", "a.gguf", "--out", "peft")
	wantRefused(t, dir, []string{"--out rep/report.html exists", force}, "report", "r", "--out", "rep", "--format", "png")
	wantRefused(t, dir, []string{"out mine.gguf exists", force}, "sft", "-m", model, "--data", "d.jsonl", "-o", "mine.gguf")
	wantRefused(t, dir, []string{"--out mine.gguf exists", force}, "model", "init", "--out", "mine.gguf")
	wantRefused(t, dir, []string{"--out mine.gguf exists", force}, "export", "--model", "base.gguf", "--lora", "a.gguf", "--out", "mine.gguf")
	_, stderr, err = runCLIIn(t, dir, "export", "--format", "peft", "--model", "base.gguf", "--lora", "a.gguf", "--out", "peft", "--force")
	require.NoError(t, err, stderr)
	b, err := os.ReadFile(filepath.Join(dir, "peft", "adapter_config.json"))
	require.NoError(t, err)
	assert.NotEqual(t, "mine", string(b))
}

// §2 for the developer checks (empo2 check …): an existing --out, a file
// --dump writes and a report file in OUTDIR are refused unless --force,
// named, like every other writing command's outputs; with --force the
// report replaces them.
func TestCheckOutputsNeedForce(t *testing.T) {
	model := llmTestModel(t)
	dir := t.TempDir()
	for _, d := range []string{"dump", "work/phases", "out"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	for name, body := range map[string]string{"mine.json": "mine", "dump/adapter.gguf": "mine", "dump2/hf-check.json": "mine",
		"out/gpu-report.md": "mine", "work/meta.json": `{"mode": "test"}`} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	force := "give --force to replace it"
	wantRefused(t, dir, []string{"--out mine.json exists", force}, "check", "rollout", "-m", model, "--out", "mine.json")
	wantRefused(t, dir, []string{"--out mine.json exists", force}, "check", "bench", "-m", model, "--out", "mine.json")
	wantRefused(t, dir, []string{"--out mine.json exists", force}, "check", "train", "-m", model, "--device", "cpu", "--out", "mine.json")
	wantRefused(t, dir, []string{"--dump " + filepath.Join("dump", "adapter.gguf") + " exists", force},
		"check", "train", "-m", model, "--device", "cpu", "--dump", "dump", "--out", "new.json")
	wantRefused(t, dir, []string{"--dump " + filepath.Join("dump2", "hf-check.json") + " exists", force},
		"check", "train", "-m", model, "--device", "cpu", "--dump", "dump2", "--out", "new.json")
	wantRefused(t, dir, []string{"OUTDIR " + filepath.Join("out", "gpu-report.md") + " exists", force}, "check", "report", "work", "out")
	// the guard's first half still holds with --force: an output over an input
	wantRefused(t, dir, []string{"--out " + model + " would overwrite the input --model " + model}, "check", "rollout", "--force", "-m", model, "--out", model)
	_, stderr, err := runCLIIn(t, dir, "check", "report", "--force", "work", "out")
	require.NoError(t, err, stderr)
	b, err := os.ReadFile(filepath.Join(dir, "out", "gpu-report.md"))
	require.NoError(t, err)
	assert.NotEqual(t, "mine", string(b))
	// a new OUTDIR needs no --force
	_, stderr, err = runCLIIn(t, dir, "check", "report", "work", "fresh")
	require.NoError(t, err, stderr)
}

// §4.6: an adapter given as the model says what it is and where it goes
// (it was "llama.cpp rejected the file (see log)").
func TestAdapterAsModel(t *testing.T) {
	dir := t.TempDir()
	loraTinyModel(t, dir, "base.gguf", nil)
	_, stderr, err := runCLIIn(t, dir, "lora", "init", "--model", "base.gguf", "--rank", "2", "--out", "a.gguf")
	require.NoError(t, err, stderr)
	_, stderr, err = runCLIIn(t, dir, "generate", "-m", "a.gguf", "--prompt", "hi")
	require.Error(t, err)
	assert.Contains(t, stderr, "a.gguf is a LoRA adapter")
	assert.Contains(t, stderr, "--lora")
	assert.False(t, strings.Contains(stderr, "rejected the file"), stderr)
}

// §6: SIGINT during step 1 says that nothing was checkpointed yet (it said
// "interrupted: checkpointed; … checkpoint= last_step=0"), exits 0, and
// the run resumes from step 1.
func TestTrainInterruptedInFirstStep(t *testing.T) {
	model := trainModel(t)
	run := filepath.Join(t.TempDir(), "r")
	cmd := exec.Command(binPath, "train", "--preset", "grpo", "-m", model, "--run-dir", run, "--steps", "3", "--threads", "1",
		"--set", "batch.rollouts=4", "--set", "batch.tasks=4", "--set", "rollout.max_action_tokens=32", "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var log strings.Builder
	sc := bufio.NewScanner(stderr)
	signalled := false
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if !signalled && strings.Contains(sc.Text(), `"first_step"`) { // OnStart: setup done, step 1 begins
			require.NoError(t, cmd.Process.Signal(os.Interrupt))
			signalled = true
		}
	}
	require.NoError(t, cmd.Wait(), log.String())
	require.True(t, signalled, log.String())
	if _, err := os.Stat(filepath.Join(run, "metrics.jsonl")); err == nil {
		b, _ := os.ReadFile(filepath.Join(run, "metrics.jsonl"))
		if len(b) > 0 {
			t.Skip("step 1 completed before the signal arrived")
		}
	}
	assert.Contains(t, log.String(), "interrupted during step 1: nothing was checkpointed yet")
	assert.NotContains(t, log.String(), "interrupted: checkpointed")
}

// §4.11: eval --run R --lora FOREIGN does not file its result inside R as
// if it were the run's step 0; a warning says so, and -o keeps the result.
func TestEvalRunForeignLoraNotFiled(t *testing.T) {
	model := llmTestModel(t)
	dir := t.TempDir()
	fakeRun(t, filepath.Join(dir, "r"))
	_, stderr, err := runCLIIn(t, dir, "lora", "init", "--model", model, "--rank", "2", "--out", "foreign.gguf")
	require.NoError(t, err, stderr)
	args := append([]string{"eval", "--run", "r", "-m", model, "--lora", "foreign.gguf", "--tasks", "melt", "-o", "res.json"}, evalFast...)
	_, stderr, err = runCLIIn(t, dir, args...)
	require.NoError(t, err, stderr)
	assert.Contains(t, stderr, "is not a checkpoint of the run r: the result is not filed in r/eval")
	_, err = os.Stat(filepath.Join(dir, "r", "eval"))
	assert.True(t, os.IsNotExist(err), "eval filed a foreign adapter's result in the run: %v", err)
	_, err = os.Stat(filepath.Join(dir, "res.json"))
	assert.NoError(t, err)
}
