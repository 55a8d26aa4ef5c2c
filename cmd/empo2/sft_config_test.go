package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/modelgen"
)

// sftDir is a folder with a tiny model m.gguf and two different training
// files d.jsonl and e.jsonl.
func sftDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	loraTinyModel(t, dir, "m.gguf", nil)
	for name, pairs := range map[string][][2]string{
		"d.jsonl": {{"open the red door", "open red door"}, {"pick up the key", "pick up key"}},
		"e.jsonl": {{"look at the lamp", "look at lamp"}, {"go to the kitchen", "teleport to kitchen"}},
	} {
		var lines []string
		for _, p := range pairs {
			b, err := json.Marshal(map[string]any{"messages": []map[string]string{
				{"role": "user", "content": "Task: " + p[0]}, {"role": "assistant", "content": p[1]}}})
			require.NoError(t, err)
			lines = append(lines, string(b))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	}
	return dir
}

// sftQuick is a short LoRA SFT of m.gguf on d.jsonl.
var sftQuick = []string{"sft", "-m", "m.gguf", "--data", "d.jsonl", "--rank", "4", "--epochs", "1", "--threads", "1"}

// TestSFTRefusesItsInputs: `sft -m m.gguf -o m.gguf` used to turn the
// model into an adapter (exit 0), and -o or --checkpoint on the data
// replaced it too. Every output that is an input (model, data, val,
// init), by any spelling, and two outputs on one file are refused before
// anything is opened, and the folder stays byte-identical.
func TestSFTRefusesItsInputs(t *testing.T) {
	dir := sftDir(t)
	_, stderr, err := runCLIIn(t, dir, "lora", "init", "--model", "m.gguf", "--rank", "4", "--alpha", "8", "--out", "init.gguf")
	require.NoError(t, err, stderr)
	require.NoError(t, os.Link(filepath.Join(dir, "m.gguf"), filepath.Join(dir, "hard.gguf")))
	require.NoError(t, os.Symlink("d.jsonl", filepath.Join(dir, "link.jsonl")))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "m.gguf"}, "out m.gguf would overwrite the input model m.gguf"},
		{[]string{"-o", "hard.gguf"}, "out hard.gguf would overwrite the input model m.gguf"},
		{[]string{"-o", "d.jsonl"}, "out d.jsonl would overwrite the input data d.jsonl"},
		{[]string{"-o", "link.jsonl"}, "out link.jsonl would overwrite the input data d.jsonl"},
		{[]string{"-o", "a.gguf", "--checkpoint", "d.jsonl"}, "checkpoint d.jsonl would overwrite the input data d.jsonl"},
		{[]string{"-o", "a.gguf", "--checkpoint", "./m.gguf"}, "checkpoint ./m.gguf would overwrite the input model m.gguf"},
		{[]string{"-o", "e.jsonl", "--val", "e.jsonl"}, "out e.jsonl would overwrite the input val e.jsonl"},
		{[]string{"-o", "init.gguf", "--init", "init.gguf"}, "out init.gguf would overwrite the input lora.init init.gguf"},
		{[]string{"-o", "a.gguf", "--checkpoint", "a.gguf"}, "one output would overwrite the other"},
		{[]string{"-o", "."}, "out . is a directory"},
	} {
		wantRefused(t, dir, []string{c.want}, append(append([]string(nil), sftQuick...), c.args...)...)
	}
	wantRefused(t, dir, []string{"out ./m.gguf would overwrite the input model m.gguf"},
		"sft", "--full", "-m", "m.gguf", "--data", "d.jsonl", "-o", "./m.gguf", "--threads", "1")
}

// TestSFTRefusesUnclearSettings: settings that were silently accepted
// (--min-lr above --lr was lowered to it, --max-len -5 and --micro-tokens
// -1 meant the defaults, --lr 1e30 exited 0 with an adapter `lora
// validate` rejects) are refused before anything is loaded or written,
// naming the key and the value.
func TestSFTRefusesUnclearSettings(t *testing.T) {
	dir := sftDir(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--lr", "0.001", "--min-lr", "0.01"}, "min lr (min_lr) 0.01: want a rate in [0, lr = 0.001]"},
		{[]string{"--max-len", "-5"}, "max length (max_len) -5: want at least 2"},
		{[]string{"--micro-tokens", "-1"}, "micro_tokens -1: want at least 1"},
		{[]string{"--lr", "1e30"}, "learning rate (lr) 1e+30: want a rate in (0, 1]"},
		{[]string{"--lr", "NaN"}, "lr = .nan is not a finite number"},
		{[]string{"--alpha", "-1"}, "lora.alpha -1"},
		{[]string{"--set", "lora.targets=[q, zz]"}, "lora.targets [q zz]"},
	} {
		wantRefused(t, dir, []string{c.want}, append(append(append([]string(nil), sftQuick...), "-o", "a.gguf"), c.args...)...)
	}
}

// TestSFTResumeAndInitChecks: a --resume on other data used to continue
// the checkpoint's batches over the new data; a changed rank on resume, or
// an --init adapter of another rank, was reported as an alpha mismatch; an
// --init adapter of another base model is named as such. A start that
// is not finite (an --init adapter whose product overflows) writes no
// adapter.
func TestSFTResumeAndInitChecks(t *testing.T) {
	dir := sftDir(t)
	_, stderr, err := runCLIIn(t, dir, append(sftQuick, "-o", "a.gguf")...)
	require.NoError(t, err, stderr)
	_, err = os.Stat(filepath.Join(dir, "a.state.gguf"))
	require.NoError(t, err)

	resume := append(append([]string(nil), sftQuick...), "-o", "a.gguf", "--resume")
	wantRefused(t, dir, []string{"checkpoint a.state.gguf was made on other training data"},
		append(append([]string(nil), resume...), "--data", "e.jsonl")...)
	wantRefused(t, dir, []string{"the adapter has rank 4, the policy rank 8"}, append(resume, "--rank", "8")...)
	_, stderr, err = runCLIIn(t, dir, resume...)
	require.NoError(t, err, "the same data resumes: %s", stderr)

	// --init adapters: another rank, another base model
	loraTinyModel(t, dir, "other.gguf", func(c *modelgen.Config) { c.Hidden, c.FFN = 32, 64 })
	_, stderr, err = runCLIIn(t, dir, "lora", "init", "--model", "other.gguf", "--rank", "4", "--alpha", "8", "--out", "other-a.gguf")
	require.NoError(t, err, stderr)
	_, stderr, err = runCLIIn(t, dir, "lora", "init", "--model", "m.gguf", "--rank", "4", "--alpha", "8", "--out", "r4.gguf")
	require.NoError(t, err, stderr)
	wantRefused(t, dir, []string{"lora.init r4.gguf", "the adapter has rank 4, the policy rank 8"},
		append(append([]string(nil), sftQuick...), "-o", "b.gguf", "--rank", "8", "--init", "r4.gguf")...)
	wantRefused(t, dir, []string{"lora.init other-a.gguf", "does not fit the policy's base model", "shape"},
		append(append([]string(nil), sftQuick...), "-o", "b.gguf", "--alpha", "8", "--init", "other-a.gguf")...)

	// an adapter whose B·A overflows float32: the forward pass is not
	// finite, training stops and nothing is written
	base, err := gguf.Open(filepath.Join(dir, "m.gguf"))
	require.NoError(t, err)
	a, err := lora.Init(base, lora.InitConfig{Rank: 4, Alpha: 8, Seed: 1, RandomB: true})
	require.NoError(t, err)
	for _, p := range a.Pairs {
		for i := range p.A {
			p.A[i] = 1e30
		}
		for i := range p.B {
			p.B[i] = 1e30
		}
	}
	require.NoError(t, a.Write(filepath.Join(dir, "huge.gguf"), gguf.TypeF32))
	_, stderr, err = runCLIIn(t, dir, append(append([]string(nil), sftQuick...), "-o", "h.gguf", "--alpha", "8", "--init", "huge.gguf")...)
	require.Error(t, err, "a diverging run exits non-zero")
	assert.Contains(t, stderr, "non-finite value")
	_, err = os.Stat(filepath.Join(dir, "h.gguf"))
	assert.True(t, os.IsNotExist(err), "no adapter is written from a diverged run")
}

// TestSFTConfigFile: sft's configuration comes from a file, --set (values
// whole: a flow list with commas) and the flags, in that order, and
// --print-config prints it documented; an unknown key names itself and
// its line.
func TestSFTConfigFile(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sft.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("model: m.gguf\nepochs: 5\nlora:\n  rank: 8\n"), 0o644))
	out, stderr, err := runCLI(t, "sft", "--config", cfg, "--set", "lora.targets=[q, v]", "--set", "epochs=7", "--rank", "2", "--print-config")
	require.NoError(t, err, stderr)
	for _, want := range []string{"model: m.gguf", "epochs: 7", "rank: 2", "targets: [q, v]", "# LoRA rank r", "max_len: null"} {
		assert.Contains(t, out, want)
	}
	require.NoError(t, os.WriteFile(cfg, []byte("model: m.gguf\nlora:\n  rnak: 8\n"), 0o644))
	_, stderr, err = runCLI(t, "sft", "--config", cfg, "--print-config")
	require.Error(t, err)
	assert.Contains(t, stderr, "rnak")
	assert.Contains(t, stderr, "line 3")
}
