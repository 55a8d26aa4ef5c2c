package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/trainer"
)

// evalRunDir writes a run directory with no checkpoint whose
// configuration names model, textlab and the tasks (the rest: defaults).
func evalRunDir(t *testing.T, model string, tasks ...string) string {
	t.Helper()
	run := t.TempDir()
	q := make([]string, len(tasks))
	for i, x := range tasks {
		q[i] = strconv.Quote(x)
	}
	yaml := "model: " + strconv.Quote(model) + "\nenv: textlab\ntasks: [" + strings.Join(q, ", ") + "]\n"
	require.NoError(t, os.WriteFile(filepath.Join(run, trainer.ConfigFile), []byte(yaml), 0o644))
	return run
}

// TestEvalRunPlaysWhatItTrained: `eval --run DIR` on a run trained on one
// task used to queue every task of the environment (3,638 episodes on
// ScienceWorld); it now plays the run's tasks (a task/N stands for the
// task), says its plan before the first episode, and --tasks overrides;
// --ood says which held-out tasks it plays.
func TestEvalRunPlaysWhatItTrained(t *testing.T) {
	model := llmTestModel(t)
	run := evalRunDir(t, model, "melt/3")
	tasksOf := func(args ...string) (map[string]json.RawMessage, string) {
		out, stderr, err := runCLI(t, append(append([]string{"eval", "--json", "--run", run}, evalFast...), args...)...)
		require.NoError(t, err, stderr)
		var top struct {
			Off struct {
				Tasks map[string]json.RawMessage `json:"tasks"`
			} `json:"memory_off"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &top), out)
		return top.Off.Tasks, stderr
	}
	tasks, stderr := tasksOf()
	assert.Equal(t, []string{"melt"}, names(mapOf(tasks)), "the run's task only")
	assert.Contains(t, stderr, "eval plan: melt: 1 test variations × 1 episode × 1 setting (off) = 1 episode")
	tasks, _ = tasksOf("--tasks", "light-bulb,use-thermometer")
	assert.Equal(t, []string{"light-bulb", "use-thermometer"}, names(mapOf(tasks)), "--tasks overrides")

	_, stderr, err := runCLI(t, append([]string{"eval", "--run", run, "--ood", "--trials", "2"}, evalFast...)...)
	require.NoError(t, err, stderr)
	assert.Contains(t, stderr, "eval plan: boil, freeze: 2 test variations × 2 trials × 2 settings (on, off) = 8 episodes")
}

func mapOf(m map[string]json.RawMessage) map[string]string {
	out := map[string]string{}
	for k := range m {
		out[k] = ""
	}
	return out
}

// TestEvalRefusesUnclearSettings: --checkpoint -1 silently meant the
// latest checkpoint, --success-score NaN was accepted, --trials 1000000000
// was refused without a reason; each is now refused naming the key and
// what is wanted. A 0 that meant "the run's value" (--threshold 0) is a
// value.
func TestEvalRefusesUnclearSettings(t *testing.T) {
	model := llmTestModel(t)
	run := evalRunDir(t, model)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--run", run, "--checkpoint", "-1"}, `checkpoint "-1": want latest, base or a step number ≥ 0`},
		{[]string{"--model", model, "--success-score", "NaN"}, "rollout.success_score = .nan is not a finite number"},
		{[]string{"--model", model, "--ood", "--trials", "1000000000"}, "trials 1000000000: want 1..1000"},
		{[]string{"--model", model, "--set", "eval.split=holdout"}, `eval.split "holdout"`},
	} {
		wantRefused(t, t.TempDir(), []string{c.want}, append(append([]string{"eval"}, evalFast...), c.args...)...)
	}
	out, stderr, err := runCLI(t, "eval", "--run", run, "--threshold", "0", "--set", "tasks=[melt, light-bulb]", "--print-config")
	require.NoError(t, err, stderr)
	assert.Contains(t, out, "  threshold: 0\n")
	assert.Contains(t, out, "tasks: [melt, light-bulb]")
	assert.Contains(t, out, "model: "+model)
}

// TestEvalWarnsContextTooSmall: a context that cannot hold the first
// prompt used to end every episode before its first action without a
// word; eval now warns, naming the prompt's length and the context.
func TestEvalWarnsContextTooSmall(t *testing.T) {
	model := llmTestModel(t)
	_, stderr, err := runCLI(t, append([]string{"eval", "--model", model, "--tasks", "melt"}, append(evalFast, "--ctx", "40")...)...)
	require.NoError(t, err, stderr)
	// llama.cpp gives a sequence at least 256 tokens: the context of 40 is 256
	assert.Contains(t, stderr, "the first prompt of melt is ")
	assert.Contains(t, stderr, "does not fit the context of 256 tokens per episode")
	_, stderr, err = runCLI(t, append([]string{"eval", "--model", model, "--tasks", "melt"}, evalFast...)...)
	require.NoError(t, err, stderr)
	assert.NotContains(t, stderr, "does not fit the context")
}

// TestEnvDemosSkipPastTheEnd: --skip-variations past the end of the split
// used to play nothing and say "no demonstration completed (0 skipped)";
// it is refused up front, naming the task and its variations.
func TestEnvDemosSkipPastTheEnd(t *testing.T) {
	dir := t.TempDir()
	wantRefused(t, dir, []string{"--skip-variations 100 leaves no variation to play: melt has", "train variations"},
		"env", "demos", "textlab", "--tasks", "melt", "--skip-variations", "100", "--kind", "explore", "--simplifications", "easy", "-o", "d.jsonl")
	_, stderr, err := runCLIIn(t, dir, "env", "demos", "textlab", "--tasks", "melt,find-living-thing", "--skip-variations", "20",
		"--variations", "1", "--kind", "explore", "--simplifications", "easy", "-o", "d.jsonl")
	require.NoError(t, err, stderr)
	assert.True(t, strings.Contains(stderr, "leaves no variation of a task: melt has"), stderr)
}
