package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/memstore"
)

func evalCfg() EvalConfig {
	cfg := DefaultEvalConfig()
	cfg.Tasks = []string{"find-living-thing", "melt"}
	cfg.MaxVariations = 2
	cfg.Seed = 3
	return cfg
}

func TestEvaluateDeterministic(t *testing.T) {
	ctx := context.Background()
	m := rolloutModel(t)
	run := func(seed int64) (*EvalReport, []byte) {
		cfg := evalCfg()
		cfg.Seed = seed
		rep, err := Evaluate(ctx, testRoller(t, m, 3, nil), cfg)
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
		sameSteps(t, a.OffEpisodes[i].Steps, b.OffEpisodes[i].Steps)
	}
	assert.Nil(t, a.MemoryOn)
	require.NotNil(t, a.MemoryOff)
	assert.Equal(t, 4, a.MemoryOff.Episodes)
	assert.Len(t, a.MemoryOff.Tasks, 2)
	assert.Equal(t, 2, a.MemoryOff.Tasks["melt"].Episodes)
	// the JSON schema of issue 12.1
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

	_, err := Evaluate(ctx, testRoller(t, m, 2, nil), EvalConfig{Memory: MemoryOn, Tasks: []string{"melt"}})
	assert.ErrorIs(t, err, ErrNoMemory)
	_, err = Evaluate(ctx, testRoller(t, m, 2, nil), EvalConfig{Memory: "sometimes"})
	assert.ErrorIs(t, err, ErrEval)
	_, err = Evaluate(ctx, testRoller(t, m, 2, nil), EvalConfig{Tasks: []string{"juggle"}})
	assert.Error(t, err)
}

func TestEvaluateMemoryOnlyChangesTipBlock(t *testing.T) {
	ctx := context.Background()
	m := rolloutModel(t)
	mem := testStore(t)
	r := testRoller(t, m, 4, mem)
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
		if on.Steps[0].TipSpan != [2]int{} {
			withTips++
			continue
		}
		sameSteps(t, off.Steps, on.Steps) // no tips anywhere: identical
	}
	assert.Equal(t, 1, withTips)
	assert.Positive(t, rep.MemoryOn.TipsRetrievedMean)
	after, err := mem.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, before, after, "eval leaves the memory alone")
}

func TestEvaluateOOD(t *testing.T) {
	ctx := context.Background()
	path := rolloutModelFile(t)
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
	mem := testStore(t)
	r := testRoller(t, m, 4, mem)
	require.NoError(t, r.lctx.SetAdapter(ad, 1))

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
