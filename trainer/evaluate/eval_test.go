package evaluate

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
)

// evalCfg: 1 episode of the first 2 test variations of two tasks at
// temperature 0.4 (the CLI's defaults), memory off, seed 3.
func evalCfg() Config {
	return Config{Protocol: Protocol{Split: environments.Test, Episodes: 1, Memory: MemoryOff, Temperature: 0.4, MaxVariations: 2},
		Tasks: []string{"find-living-thing", "melt"}, Seed: 3}
}

func TestEvaluateDeterministic(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	run := func(seed int64) (*Report, []byte) {
		cfg := evalCfg()
		cfg.Seed = seed
		rep, err := Evaluate(ctx, testutil.Roller(t, m, 3, nil), cfg)
		require.NoError(t, err)
		b, err := json.Marshal(rep)
		require.NoError(t, err)
		return rep, b
	}
	a, ja := run(3)
	b, jb := run(3)
	assert.JSONEq(t, string(ja), string(jb))
	require.Len(t, a.OffEpisodes, 4)
	for i := range a.OffEpisodes {
		testutil.SameSteps(t, a.OffEpisodes[i].Steps, b.OffEpisodes[i].Steps)
	}
	assert.Nil(t, a.MemoryOn)
	require.NotNil(t, a.MemoryOff)
	assert.Equal(t, 4, a.MemoryOff.Episodes)
	assert.Len(t, a.MemoryOff.Tasks, 2)
	assert.Equal(t, 2, a.MemoryOff.Tasks["melt"].Episodes)
	// the JSON schema of `empo2 eval --json`
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(ja, &top))
	assert.NotContains(t, top, "memory_on")
	var off map[string]any
	require.NoError(t, json.Unmarshal(top["memory_off"], &off))
	for _, k := range []string{"score_mean", "success_rate", "episodes", "tasks"} {
		assert.Contains(t, off, k)
	}
	c, _ := run(4)
	assert.NotEqual(t, a.OffEpisodes[0].Steps[0].Response, c.OffEpisodes[0].Steps[0].Response, "another seed samples otherwise")

	_, err := Evaluate(ctx, testutil.Roller(t, m, 2, nil), Config{Protocol: Protocol{Memory: MemoryOn}, Tasks: []string{"melt"}})
	assert.ErrorIs(t, err, rollout.ErrNoMemory)
	_, err = Evaluate(ctx, testutil.Roller(t, m, 2, nil), Config{Protocol: Protocol{Memory: "sometimes"}})
	assert.ErrorIs(t, err, ErrEval)
	_, err = Evaluate(ctx, testutil.Roller(t, m, 2, nil), Config{Tasks: []string{"juggle"}})
	assert.Error(t, err)
}

func TestEvaluateMemoryOnlyChangesTipBlock(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	mem := testutil.Store(t)
	r := testutil.Roller(t, m, 4, mem)
	cfg := evalCfg()
	// tips for the start state of one variation
	first, err := Evaluate(ctx, r, cfg)
	require.NoError(t, err)
	ep0 := first.OffEpisodes[0]
	_, err = mem.Add(ctx, ep0.Namespace(), []memstore.Entry{{Key: ep0.Steps[0].Key, Content: "open the doors first", Score: 30}})
	require.NoError(t, err)
	before, err := mem.Stats(ctx)
	require.NoError(t, err)

	cfg.Memory = MemoryBoth
	rep, err := Evaluate(ctx, r, cfg)
	require.NoError(t, err)
	require.NotNil(t, rep.MemoryOn)
	require.NotNil(t, rep.MemoryOff)
	require.Len(t, rep.OnEpisodes, len(rep.OffEpisodes))
	withTips := 0
	for i := range rep.OffEpisodes {
		off, on := rep.OffEpisodes[i], rep.OnEpisodes[i]
		assert.Equal(t, off.Job.Seed, on.Job.Seed)
		// the first prompts differ exactly by the tip block
		assert.Equal(t, off.Steps[0].Prompt, on.Steps[0].PromptWithoutTips())
		if len(on.Steps[0].TipSpans) > 0 {
			withTips++
			continue
		}
		testutil.SameSteps(t, off.Steps, on.Steps) // no tips anywhere: identical
	}
	assert.Equal(t, 1, withTips)
	assert.Positive(t, rep.MemoryOn.TipsRetrievedMean)
	after, err := mem.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, before, after, "eval leaves the memory alone")
}

func TestEvaluateOOD(t *testing.T) {
	ctx := context.Background()
	path := testutil.ModelFile(t)
	base, err := gguf.Open(path)
	require.NoError(t, err)
	a, err := lora.Init(base, lora.InitConfig{Rank: 2, Alpha: 4, Seed: 9, RandomB: true})
	require.NoError(t, err)
	adapterPath := filepath.Join(t.TempDir(), "adapter.gguf")
	require.NoError(t, a.Write(adapterPath, gguf.TypeF32))
	adapterBytes, err := os.ReadFile(adapterPath)
	require.NoError(t, err)

	m, err := llama.LoadModel(path, llama.ModelParams{})
	require.NoError(t, err)
	defer m.Close()
	ad, err := m.LoadAdapter(adapterPath)
	require.NoError(t, err)
	defer ad.Close()
	mem := testutil.Store(t)
	c := testutil.Context(t, m, 4)
	require.NoError(t, c.SetAdapter(ad, 1))
	r := testutil.RollerOn(t, c, mem)

	cfg := OODConfig{Trials: 2, MaxVariations: 1, Temperature: 0.4, Seed: 1, Dir: t.TempDir()}
	rep, err := EvaluateOOD(ctx, r, cfg)
	require.NoError(t, err)
	assert.Equal(t, []string{"boil", "freeze"}, rep.Tasks, "textlab's held-out families")
	assert.Equal(t, 2, rep.Variations)
	assert.Equal(t, []int{2, 2}, rep.MemoryOn.TipsPerTrial, "exactly one tip per trial and variation")
	assert.Equal(t, []int{0, 0}, rep.MemoryOff.TipsPerTrial)
	assert.Len(t, rep.MemoryOn.ScorePerTrial, 2)
	assert.InDelta(t, rep.MemoryOn.ScorePerTrial[1]-rep.MemoryOn.ScorePerTrial[0], rep.MemoryOn.Improvement, 1e-9)
	// the fresh memory holds the tips of trials 1..K; the run's memory is untouched
	st, err := memstore.Open(filepath.Join(cfg.Dir, "ood-memory.db"), memstore.NewHashEmbedder(memstore.DefaultDim))
	require.NoError(t, err)
	defer st.Close()
	assert.Len(t, st.Namespaces(), 2)
	assert.Empty(t, mem.Namespaces())
	// no weight updates: adapter file and the loaded weights unchanged
	now, err := os.ReadFile(adapterPath)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(adapterBytes, now))
	// a second run repeats the first exactly (fresh memory, same seeds)
	cfg.Dir = ""
	again, err := EvaluateOOD(ctx, r, cfg)
	require.NoError(t, err)
	assert.Equal(t, rep, again)
}
