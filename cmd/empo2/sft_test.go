package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/modelgen"
)

// demos → sft → sft eval through the binary, on a tiny generated model.
func TestSFTCommandPipeline(t *testing.T) {
	dir := t.TempDir()
	demos := filepath.Join(dir, "d.jsonl")
	corpus := filepath.Join(dir, "corpus.txt")
	out, serr, err := runCLI(t, "env", "demos", "textlab", "--tasks", "melt,use-thermometer", "--split", "train", "--variations", "1",
		"--kind", "explore", "--simplifications", "easy", "-o", demos, "--text", corpus)
	require.NoError(t, err, serr)
	assert.Contains(t, out, "2 episodes")
	f, err := os.Open(demos)
	require.NoError(t, err)
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	n := 0
	for sc.Scan() {
		var rec struct {
			Messages []struct{ Role, Content string } `json:"messages"`
			Meta     map[string]any                   `json:"meta"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec))
		require.Equal(t, "system", rec.Messages[0].Role)
		require.True(t, strings.HasPrefix(rec.Messages[1].Content, "Task: "))
		last := rec.Messages[len(rec.Messages)-1]
		require.Equal(t, "assistant", last.Role)
		require.Contains(t, last.Content, "The task is complete with score 100/100.")
		assert.Equal(t, "explore", rec.Meta["kind"])
		n++
	}
	f.Close()
	require.Equal(t, 2, n)
	st, err := os.Stat(corpus)
	require.NoError(t, err)
	require.Greater(t, st.Size(), int64(1000))

	model := filepath.Join(dir, "m.gguf")
	cfg := modelgen.DefaultConfig()
	cfg.Ctx = 2048
	require.NoError(t, modelgen.Write(model, cfg))
	adapter := filepath.Join(dir, "a.gguf")
	out, serr, err = runCLI(t, "sft", "-m", model, "--data", demos, "--val", demos, "-o", adapter, "--rank", "4", "--alpha", "8",
		"--epochs", "2", "--batch-tokens", "100000", "--threads", "1", "--json")
	require.NoError(t, err, serr)
	var epochs []map[string]float64
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "{") {
			var e map[string]float64
			require.NoError(t, json.Unmarshal([]byte(line), &e))
			epochs = append(epochs, e)
		}
	}
	require.Len(t, epochs, 2, out)
	assert.Less(t, epochs[1]["val_loss"], epochs[0]["val_loss"])
	a, err := lora.Read(adapter)
	require.NoError(t, err)
	assert.Equal(t, 4, a.Rank())
	_, err = os.Stat(filepath.Join(dir, "a.state.gguf"))
	require.NoError(t, err, "checkpoint written")

	// resume: the checkpoint is complete (2 epochs), so nothing more is trained
	out, serr, err = runCLI(t, "sft", "-m", model, "--data", demos, "-o", adapter, "--rank", "4", "--alpha", "8",
		"--epochs", "2", "--batch-tokens", "100000", "--threads", "1", "--resume")
	require.NoError(t, err, serr)
	assert.NotContains(t, out, "epoch 1:")

	out, serr, err = runCLI(t, "sft", "eval", "textlab", "-m", model, "--lora", adapter, "--tasks", "melt", "--split", "train",
		"--variations", "1", "--simplifications", "easy", "--threads", "1", "--json")
	require.NoError(t, err, serr)
	var ev struct {
		Summary []struct {
			Task     string `json:"task"`
			Episodes int    `json:"episodes"`
		} `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ev), out)
	require.Len(t, ev.Summary, 2)
	assert.Equal(t, 1, ev.Summary[1].Episodes)
}

func TestSFTCommandErrors(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	require.NoError(t, modelgen.Write(model, modelgen.DefaultConfig()))
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"messages":[{"role":"user","content":"hi"}]}`+"\n"), 0o644))
	good := filepath.Join(dir, "good.jsonl")
	require.NoError(t, os.WriteFile(good, []byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"look around"}]}`+"\n"), 0o644))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sft", "-m", model, "--data", bad, "-o", filepath.Join(dir, "a.gguf")}, "no assistant message"},
		{[]string{"sft", "-m", model, "--data", filepath.Join(dir, "missing.jsonl"), "-o", filepath.Join(dir, "a.gguf")}, "no such file"},
		{[]string{"sft", "-m", model, "--data", good, "-o", filepath.Join(dir, "a.gguf"), "--full"}, "not implemented"},
		{[]string{"sft", "-m", model, "--data", good, "-o", filepath.Join(dir, "a.gguf"), "--rank", "0"}, "--rank"},
		{[]string{"sft", "-m", model, "--data", good, "-o", filepath.Join(dir, "a.gguf"), "--lr", "-1"}, "learning rate"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--split", "nope"}, "unknown split"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--kind", "explore", "--tasks", "melt", "--variations", "1"}, "teleport"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--history", "last-k"}, "--per-step"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--tasks", "nope"}, "unknown task"},
	} {
		_, stderr, err := runCLI(t, c.args...)
		require.Error(t, err, c.args)
		assert.Contains(t, stderr, c.want, c.args)
		assert.NotContains(t, stderr, "panic", c.args)
	}
}
