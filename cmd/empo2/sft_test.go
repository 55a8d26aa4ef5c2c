package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/modelgen"
)

// jsonEpochs: the per-epoch JSON lines of `sft --json` output (the lines
// that are JSON objects), decoded.
func jsonEpochs(t *testing.T, out string) []map[string]float64 {
	t.Helper()
	var epochs []map[string]float64
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "{") {
			var e map[string]float64
			require.NoError(t, json.Unmarshal([]byte(line), &e))
			epochs = append(epochs, e)
		}
	}
	return epochs
}

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
		require.True(t, strings.HasSuffix(last.Content, "The task is complete."), last.Content)
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
	epochs := jsonEpochs(t, out)
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
	model16 := filepath.Join(dir, "m16.gguf")
	c16 := modelgen.DefaultConfig()
	c16.DType = "f16"
	require.NoError(t, modelgen.Write(model16, c16))
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"messages":[{"role":"user","content":"hi"}]}`+"\n"), 0o644))
	good := filepath.Join(dir, "good.jsonl")
	require.NoError(t, os.WriteFile(good, []byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"look around"}]}`+"\n"), 0o644))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sft", "-m", model, "--data", bad, "-o", filepath.Join(dir, "a.gguf")}, "no trained assistant message"},
		{[]string{"sft", "-m", model, "--data", filepath.Join(dir, "missing.jsonl"), "-o", filepath.Join(dir, "a.gguf")}, "no such file"},
		{[]string{"sft", "-m", model, "--data", good, "-o", filepath.Join(dir, "a.gguf"), "--full", "--rank", "8"}, "lora.rank does not apply to full"},
		{[]string{"sft", "-m", model, "--data", good, "-o", filepath.Join(dir, "a.gguf"), "--full", "--targets", "q"}, "lora.targets does not apply to full"},
		{[]string{"sft", "-m", model, "--data", good, "-o", filepath.Join(dir, "a.gguf"), "--full", "--init", good}, "lora.init does not apply to full"},
		{[]string{"sft", "-m", model, "--data", good, "-o", model, "--full"}, "would overwrite the input model"},
		{[]string{"sft", "-m", model16, "--data", good, "-o", filepath.Join(dir, "a.gguf"), "--full", "--threads", "1"}, "full training needs an F32 model: tensor token_embd.weight is f16"},
		{[]string{"sft", "-m", model, "--data", good, "-o", filepath.Join(dir, "a.gguf"), "--rank", "0"}, "lora.rank 0: want at least 1"},
		{[]string{"sft", "-m", model, "--data", good, "-o", filepath.Join(dir, "a.gguf"), "--lr", "-1"}, "learning rate"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--split", "nope"}, "unknown split"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--kind", "explore", "--tasks", "melt", "--variations", "1"}, "teleport"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--history", "last-k"}, "--per-step"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--tasks", "nope"}, "unknown task"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--tip-records", "-1"}, "tip records -1: want ≥ 0"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--tip-records", "2", "--top-k", "0"}, "top-k 0: want at least 1"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--tip-records", "2", "--threshold", "2"}, "threshold 2: want a cosine in [-1, 1]"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--tip-records", "2", "--tip-failures", "0"}, "tip failures 0: want at least 1"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--tip-records", "2", "--history", "last-k", "--per-step"}, "tip records need history full"},
		{[]string{"env", "demos", "textlab", "-o", filepath.Join(dir, "d.jsonl"), "--failure-tips"}, "failure tips need tip records"},
	} {
		_, stderr, err := runCLI(t, c.args...)
		require.Error(t, err, c.args)
		assert.Contains(t, stderr, c.want, c.args)
		assert.NotContains(t, stderr, "panic", c.args)
	}
}

// sft --full through the binary: every weight trained, a new base GGUF that
// llama.cpp loads (score, generate) and that scores the trained answers
// higher than the original model; resume of a finished run trains nothing.
func TestSFTFullCommand(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	require.NoError(t, modelgen.Write(model, modelgen.DefaultConfig()))
	data := filepath.Join(dir, "d.jsonl")
	var lines []string
	for _, c := range [][2]string{{"open the red door", "open red door"}, {"pick up the key", "pick up key"},
		{"look at the lamp", "look at lamp"}, {"go to the kitchen", "teleport to kitchen"}} {
		b, err := json.Marshal(map[string]any{"messages": []map[string]string{
			{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Task: " + c[0]}, {"role": "assistant", "content": c[1]}}})
		require.NoError(t, err)
		lines = append(lines, string(b))
	}
	require.NoError(t, os.WriteFile(data, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	base := filepath.Join(dir, "base.gguf")
	args := []string{"sft", "--full", "-m", model, "--data", data, "-o", base, "--epochs", "3", "--lr", "3e-3", "--min-lr", "3e-3",
		"--warmup", "0", "--batch-tokens", "64", "--threads", "1", "--json"}
	out, serr, err := runCLI(t, args...)
	require.NoError(t, err, serr)
	epochs := jsonEpochs(t, out)
	require.Len(t, epochs, 3, out)
	assert.Less(t, epochs[2]["train_loss"], epochs[0]["train_loss"]-0.5, "%v", epochs)
	assert.Contains(t, out, "full model")
	_, err = os.Stat(filepath.Join(dir, "base.state.gguf"))
	require.NoError(t, err, "checkpoint written")

	// the new base loads in llama.cpp and prefers the trained answer
	score := func(m string) float64 {
		out, serr, err := runCLI(t, "score", "--model", m, "--chat", "--system", "You are an agent.", "--prompt", "Task: pick up the key",
			"--continuation", "pick up key<|im_end|>", "--threads", "1", "--json")
		require.NoError(t, err, serr)
		var r struct {
			Sum float64 `json:"sum_logprob"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &r), out)
		return r.Sum
	}
	before, after := score(model), score(base)
	t.Logf("sum log-prob of a trained answer: %.3f (original) → %.3f (trained base); epochs %v", before, after, epochs)
	assert.Greater(t, after, before+1)
	_, serr, err = runCLI(t, "generate", "--model", base, "--prompt", "hi", "--max-tokens", "4", "--temperature", "0", "--threads", "1")
	require.NoError(t, err, serr)

	// resume of the finished run: nothing more is trained
	out, serr, err = runCLI(t, append(args[:len(args)-1], "--resume")...)
	require.NoError(t, err, serr)
	assert.NotContains(t, out, "epoch 1:")
	// the full checkpoint cannot resume a LoRA run
	_, serr, err = runCLI(t, "sft", "-m", model, "--data", data, "-o", filepath.Join(dir, "a.gguf"), "--checkpoint",
		filepath.Join(dir, "base.state.gguf"), "--resume", "--threads", "1")
	require.Error(t, err)
	assert.Contains(t, serr, "empo2.full_train_state")
}

// env demos --tip-records through the binary: extra one-step records whose
// last user message ends with a tip block of at most --top-k tips, the
// demo's action as the answer; --skip-variations leaves out the first
// variations of the split.
func TestEnvDemosTipRecords(t *testing.T) {
	dir := t.TempDir()
	demos := filepath.Join(dir, "d.jsonl")
	out, serr, err := runCLI(t, "env", "demos", "textlab", "--tasks", "find-living-thing", "--split", "train",
		"--skip-variations", "2", "--variations", "2", "--kind", "explore", "--simplifications", "easy",
		"--tip-records", "3", "--failure-tips", "--threshold", "0.9", "--top-k", "2", "-o", demos)
	require.NoError(t, err, serr)
	assert.Contains(t, out, "2 episodes")
	f, err := os.Open(demos)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	var withTips, failTips int
	vars := map[float64]bool{}
	for sc.Scan() {
		var rec struct {
			Messages []struct{ Role, Content string } `json:"messages"`
			Meta     map[string]any                   `json:"meta"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec))
		vars[rec.Meta["variation"].(float64)] = true
		if rec.Meta["failed"] == true {
			failTips++
			assert.Contains(t, rec.Messages[len(rec.Messages)-2].Content, "The episode is over.")
			continue
		}
		if rec.Meta["memory"] == nil {
			continue
		}
		withTips++
		user := rec.Messages[len(rec.Messages)-2].Content
		require.True(t, strings.HasSuffix(user, "</memory>"), user)
		block := user[strings.LastIndex(user, "<memory>"):]
		assert.LessOrEqual(t, strings.Count(block, "\n- "), 2, block)
		assert.Contains(t, block, "(At this step the action was ")
		assert.Equal(t, "assistant", rec.Messages[len(rec.Messages)-1].Role)
	}
	require.NoError(t, sc.Err())
	assert.Positive(t, withTips)
	assert.Equal(t, 2*2, failTips, "--tip-failures 2 (default) per episode, 2 episodes")
	assert.Contains(t, out, fmt.Sprintf("(%d with retrieved tips, %d failed-attempt tip turns;", withTips, failTips))
	assert.Equal(t, map[float64]bool{2: true, 3: true}, vars, "--skip-variations 2 --variations 2")
}
