package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/optim"
)

// evalFast are the flags that keep a CLI eval on the tiny model short.
var evalFast = []string{"--threads", "1", "--step-limit", "2", "--max-action-tokens", "6", "--variations", "1", "--parallel", "4"}

func evalJSON(t *testing.T, args ...string) map[string]json.RawMessage {
	t.Helper()
	out, stderr, err := runCLI(t, append(append([]string{"eval", "--json"}, evalFast...), args...)...)
	require.NoError(t, err, stderr)
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(out), &top), out)
	return top
}

func TestEvalCLIMemoryBoth(t *testing.T) {
	ctx := context.Background()
	model := llmTestModel(t)
	db := filepath.Join(t.TempDir(), "mem.db")
	s, err := memstore.Open(db, memstore.NewHashEmbedder(memstore.DefaultDim))
	require.NoError(t, err)
	_, err = s.Add(ctx, "melt/27", []memstore.Entry{{Key: "the hallway", Content: "the ice is in the freezer", Score: 50}})
	require.NoError(t, err)
	before, err := s.Stats(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	top := evalJSON(t, "--model", model, "--tasks", "melt,light-bulb", "--memory", "both", "--memory-db", db, "--seed", "5")
	for _, k := range []string{"memory_off", "memory_on"} {
		var r map[string]any
		require.NoError(t, json.Unmarshal(top[k], &r), k)
		for _, f := range []string{"score_mean", "success_rate", "episodes", "tasks"} {
			assert.Contains(t, r, f, k)
		}
		assert.EqualValues(t, 2, r["episodes"])
		assert.Len(t, r["tasks"], 2)
	}
	// deterministic for a fixed seed
	again := evalJSON(t, "--model", model, "--tasks", "melt,light-bulb", "--memory", "both", "--memory-db", db, "--seed", "5")
	assert.JSONEq(t, string(top["memory_on"]), string(again["memory_on"]))
	s, err = memstore.Open(db, memstore.NewHashEmbedder(memstore.DefaultDim))
	require.NoError(t, err)
	after, err := s.Stats(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	before.FileBytes, after.FileBytes = 0, 0 // SQLite checkpoints its WAL on close
	assert.Equal(t, before, after, "eval does not write to the memory without --write-tips")

	// the table
	out, stderr, err := runCLI(t, append([]string{"eval", "--model", model, "--tasks", "melt", "--memory", "both", "--memory-db", db}, evalFast...)...)
	require.NoError(t, err, stderr)
	assert.Contains(t, out, "memory off score")
	assert.Contains(t, out, "memory on success")
	assert.Contains(t, out, "overall")
}

func TestEvalCLIErrors(t *testing.T) {
	model := llmTestModel(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory", "on"}, "--memory-db"},
		{[]string{"--memory", "sometimes"}, "want off, on or both"},
		{[]string{"--checkpoint", "3"}, "checkpoint 3 needs run"},
		{[]string{"--memory-db", "x.db"}, "memory_db is used with eval.memory on or both"},
		{[]string{"--memory", "on", "--memory-db", filepath.Join(t.TempDir(), "none.db")}, "no such file"},
		{[]string{"--tasks", "juggle"}, "unknown task"},
		{[]string{"--split", "holdout"}, "split"},
		{[]string{"--ood", "--memory", "on"}, "drop --memory"},
		{[]string{"--episodes", "0"}, "eval.episodes 0: want at least 1"},
		{[]string{"--env", "nowhere"}, "unknown environment"},
		{[]string{"--ood", "--tip-temperature", "101"}, "rollout.tip_temperature 101"},
	} {
		_, stderr, err := runCLI(t, append(append([]string{"eval", "--model", model}, evalFast...), tc.args...)...)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error()+stderr, tc.want, "%v", tc.args)
	}
	_, stderr, err := runCLI(t, "eval", "--threads", "1")
	require.Error(t, err)
	assert.Contains(t, stderr, "no model: give model (-m FILE)")
}

func TestEvalCLIOOD(t *testing.T) {
	model := llmTestModel(t)
	top := evalJSON(t, "--model", model, "--ood", "--trials", "2")
	var tasks []string
	require.NoError(t, json.Unmarshal(top["tasks"], &tasks))
	assert.Equal(t, []string{"boil", "freeze"}, tasks)
	var on, off evaluate.OODSeries
	require.NoError(t, json.Unmarshal(top["memory_on"], &on))
	require.NoError(t, json.Unmarshal(top["memory_off"], &off))
	assert.Equal(t, []int{2, 2}, on.TipsPerTrial, "one tip per trial and variation")
	assert.Equal(t, []int{0, 0}, off.TipsPerTrial)
	assert.Len(t, on.ScorePerTrial, 2)

	out, stderr, err := runCLI(t, append([]string{"eval", "--model", model, "--ood", "--trials", "2"}, evalFast...)...)
	require.NoError(t, err, stderr)
	assert.Contains(t, out, "improvement trial 1 → 2")
}

// TestEvalCLIRun evaluates a run directory's latest checkpoint: the
// adapter is used read-only and the JSON lands in the run's eval/.
func TestEvalCLIRun(t *testing.T) {
	model := llmTestModel(t)
	run := t.TempDir()
	cfg := trainer.DefaultConfig()
	cfg.Model, cfg.Env = model, "textlab"
	var buf bytes.Buffer
	require.NoError(t, trainer.PrintConfig(&buf, cfg))
	require.NoError(t, os.WriteFile(filepath.Join(run, trainer.ConfigFile), buf.Bytes(), 0o644))
	ck := filepath.Join(run, optim.CheckpointsDir, optim.CheckpointName(2))
	require.NoError(t, os.MkdirAll(ck, 0o755))
	base, err := gguf.Open(model)
	require.NoError(t, err)
	a, err := lora.Init(base, lora.InitConfig{Rank: 2, Alpha: 4, Seed: 3, RandomB: true})
	require.NoError(t, err)
	adapter := filepath.Join(ck, optim.AdapterFile)
	require.NoError(t, a.Write(adapter, gguf.TypeF32))
	require.NoError(t, os.WriteFile(filepath.Join(ck, optim.CheckpointMeta), []byte(`{"step":2,"updates":2,"seed":1,"time":"2026-01-01T00:00:00Z"}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(run, optim.CheckpointsDir, optim.LatestFile), []byte(optim.CheckpointName(2)+"\n"), 0o644))
	adBytes, err := os.ReadFile(adapter)
	require.NoError(t, err)

	top := evalJSON(t, "--run", run, "--tasks", "melt")
	assert.Contains(t, top, "memory_off")
	written, err := filepath.Glob(filepath.Join(run, "eval", "*.json"))
	require.NoError(t, err)
	require.Len(t, written, 1)
	assert.True(t, strings.HasSuffix(written[0], "eval-test-off-step-000002.json"), written[0])
	now, err := os.ReadFile(adapter)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(adBytes, now), "the checkpoint adapter is never written")

	// OOD on the run: no weight updates either; its report (another
	// schema) goes to eval/ood/
	evalJSON(t, "--run", run, "--ood", "--trials", "2")
	_, err = os.Stat(filepath.Join(run, "eval", "ood", "ood-test-k2-step-000002.json"))
	require.NoError(t, err)
	written, err = filepath.Glob(filepath.Join(run, "eval", "*.json"))
	require.NoError(t, err)
	assert.Len(t, written, 1)
	now, err = os.ReadFile(adapter)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(adBytes, now))
	_, err = os.Stat(filepath.Join(run, trainer.MemoryFile))
	assert.True(t, os.IsNotExist(err), "OOD uses a fresh memory, not the run's")

	_, _, err = runCLI(t, append([]string{"eval", "--run", run, "--checkpoint", "7"}, evalFast...)...)
	require.Error(t, err)
	_, _, err = runCLI(t, append([]string{"eval", "--run", run, "--memory", "on"}, evalFast...)...)
	require.Error(t, err, "the run has no memory.db yet")
}

// TestEvalCLIEpisodesOut: --episodes-out writes one line per episode
// played, and the per-trial means recomputed from the lines are the
// summary's; memory-on trials after the first show the tip blocks their
// prompts carried (the fresh memory holds trial 1's tips), the control
// never does. The file follows the output guard.
func TestEvalCLIEpisodesOut(t *testing.T) {
	model := llmTestModel(t)
	dir := t.TempDir()
	eps, res := filepath.Join(dir, "eps.jsonl"), filepath.Join(dir, "res.json")
	args := append([]string{"eval", "--model", model, "--ood", "--trials", "2", "--threshold", "0.01", "-o", res, "--episodes-out", eps}, evalFast...)
	_, stderr, err := runCLI(t, args...)
	require.NoError(t, err, stderr)
	var rep evaluate.OODReport
	b, err := os.ReadFile(res)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	b, err = os.ReadFile(eps)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 2*2*rep.Variations, "settings × trials × variations")
	sum := map[string][]float64{"on": make([]float64, 2), "off": make([]float64, 2)}
	blocks := map[string]int{}
	for _, l := range lines {
		var tr evaluate.Transcript
		require.NoError(t, json.Unmarshal([]byte(l), &tr))
		require.NotEmpty(t, tr.Steps, l)
		require.Contains(t, []int{1, 2}, tr.Trial)
		sum[string(tr.Setting)][tr.Trial-1] += tr.Score / float64(rep.Variations)
		for _, s := range tr.Steps {
			assert.NotEmpty(t, s.Action)
			if s.Tips != "" {
				blocks[fmt.Sprintf("%s/%d", tr.Setting, tr.Trial)]++
				assert.Contains(t, s.Tips, "<memory>")
			}
		}
	}
	for i := range 2 {
		assert.InDelta(t, rep.MemoryOn.ScorePerTrial[i], sum["on"][i], 1e-9)
		assert.InDelta(t, rep.MemoryOff.ScorePerTrial[i], sum["off"][i], 1e-9)
	}
	assert.Positive(t, blocks["on/2"], "trial 2 with memory reads trial 1's tips")
	assert.Zero(t, blocks["on/1"]+blocks["off/1"]+blocks["off/2"], "no block without a memory to read")

	// without --ood: one line per episode of each setting played
	plain := filepath.Join(dir, "plain.jsonl")
	top := evalJSON(t, "--model", model, "--tasks", "melt,light-bulb", "--episodes-out", plain)
	var off evaluate.Result
	require.NoError(t, json.Unmarshal(top["memory_off"], &off))
	b, err = os.ReadFile(plain)
	require.NoError(t, err)
	lines = strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, off.Episodes)
	mean := 0.0
	for _, l := range lines {
		var tr evaluate.Transcript
		require.NoError(t, json.Unmarshal([]byte(l), &tr))
		assert.Equal(t, evaluate.MemoryOff, tr.Setting)
		assert.Zero(t, tr.Trial)
		mean += tr.Score / float64(len(lines))
	}
	assert.InDelta(t, off.ScoreMean, mean, 1e-9)

	require.NoError(t, os.Remove(res))
	_, stderr, err = runCLI(t, args...)
	require.Error(t, err)
	assert.Contains(t, err.Error()+stderr, "episodes_out", "an existing transcript file needs --force")
}
