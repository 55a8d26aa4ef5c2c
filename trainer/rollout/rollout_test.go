package rollout_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/algo"
	"github.com/empo2/empo2/environments"
	_ "github.com/empo2/empo2/environments/textlab"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
)

func TestRolloutRuns(t *testing.T) {
	m := testutil.Model(t)
	r := testutil.Roller(t, m, 4, nil)
	jobs := testutil.Jobs(6, false) // more jobs than slots: slots are handed on
	eps, st, err := r.Run(context.Background(), jobs)
	require.NoError(t, err)
	require.Len(t, eps, 6)
	steps := 0
	for i, ep := range eps {
		assert.Equal(t, jobs[i], ep.Job)
		require.NotEmpty(t, ep.Steps)
		assert.LessOrEqual(t, len(ep.Steps), 3)
		assert.Contains(t, []rollout.End{rollout.EndDone, rollout.EndStepLimit}, ep.End)
		for k, s := range ep.Steps {
			require.NotEmpty(t, s.Response)
			assert.Len(t, s.OldLogp, len(s.Response))
			assert.LessOrEqual(t, len(s.Response), 8)
			for _, lp := range s.OldLogp {
				assert.True(t, lp <= 0 && !math.IsInf(float64(lp), 0))
			}
			assert.Empty(t, s.TipSpans)
			assert.Nil(t, s.NoTips)
			assert.Equal(t, s.Prompt, s.PromptWithoutTips())
			assert.NotEmpty(t, s.Observation)
			assert.True(t, strings.HasPrefix(s.Key, "user: Task: "), "the conversation key: %.40q", s.Key)
			if k > 0 {
				// full history: this prompt extends the previous prompt and its response
				prev := ep.Steps[k-1]
				// (a sampled end-of-generation token becomes the template's end of turn)
				resp := prev.Response
				if m.IsEOG(resp[len(resp)-1]) {
					resp = resp[:len(resp)-1]
				}
				base := append(append([]int32(nil), prev.Prompt...), resp...)
				base = append(base, r.Renderer().EndOfTurn())
				assert.Equal(t, base, s.Prompt[:len(base)], "episode %d step %d", i, k)
			}
		}
		steps += len(ep.Steps)
		assert.Equal(t, 0.0, ep.Intrinsic)
	}
	assert.Equal(t, 6, st.Episodes)
	assert.Equal(t, steps, st.EnvSteps)
	assert.Greater(t, st.PromptTokensSeen, st.PromptTokensDecoded)
	assert.Positive(t, st.GenTokens)
	assert.Positive(t, st.TRollout)
	// KV reuse: only the new tokens of each turn are decoded (plus the
	// last prompt token of a turn whose prompt the slot already held)
	assert.LessOrEqual(t, float64(st.PromptTokensDecoded), 1.1*float64(st.PromptTokensUnique))
	t.Logf("prompt tokens decoded/seen %d/%d = %.3f, decoded/unique %d/%d = %.3f", st.PromptTokensDecoded, st.PromptTokensSeen,
		float64(st.PromptTokensDecoded)/float64(st.PromptTokensSeen), st.PromptTokensDecoded, st.PromptTokensUnique,
		float64(st.PromptTokensDecoded)/float64(st.PromptTokensUnique))

	_, _, err = r.Run(context.Background(), []rollout.Job{{Task: "nope"}})
	assert.ErrorIs(t, err, environments.ErrUnknownTask)
	_, _, err = r.Run(context.Background(), []rollout.Job{{Task: "melt", Variation: 10000}})
	assert.ErrorIs(t, err, environments.ErrBadVariation)
	_, _, err = r.Run(context.Background(), []rollout.Job{{Task: "melt", Mode: algo.ModeOnPolicyTips}})
	assert.ErrorIs(t, err, rollout.ErrNoMemory)
}

// TestRolloutKVReuseEqualsFresh: every step's tokens and log-probs, sampled
// with the episode's KV reused across turns and batched with other
// episodes, equal sampling that step's prompt alone in a fresh context.
func TestRolloutKVReuseEqualsFresh(t *testing.T) {
	m := testutil.Model(t)
	r := testutil.Roller(t, m, 3, nil)
	eps, st, err := r.Run(context.Background(), testutil.Jobs(5, false))
	require.NoError(t, err)
	require.Greater(t, st.PromptTokensSeen, 2*st.PromptTokensDecoded/2)
	fresh, err := llama.NewContext(m, llama.ContextParams{NSeqMax: 1, NCtx: 2048, Threads: 1})
	require.NoError(t, err)
	defer fresh.Close()
	n := 0
	for _, ep := range eps {
		for k, s := range ep.Steps {
			require.NoError(t, fresh.ClearSlots())
			one, err := fresh.GenerateSlots(context.Background(), []llama.SlotRequest{{
				Slot: 0, Prompt: s.Prompt, Seed: rollout.MixSeed(7, ep.Seed), Stream: k,
			}}, llama.SampleParams{Temperature: 1, MaxTokens: 8})
			require.NoError(t, err)
			require.Equal(t, s.Response, one[0].Tokens)
			for i := range s.OldLogp {
				require.InDelta(t, one[0].LogProbs[i], s.OldLogp[i], 1e-4)
			}
			n++
		}
	}
	assert.Greater(t, n, 5)
}

func TestRolloutMemoryOnlyChangesTipBlock(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	mem := testutil.Store(t)
	r := testutil.Roller(t, m, 4, mem)
	jobs := testutil.Jobs(2, false)
	// a tip for the first job's start state
	off, _, err := r.Run(ctx, jobs)
	require.NoError(t, err)
	_, err = mem.Add(ctx, jobs[0].Namespace(), []memstore.Entry{{Key: off[0].Steps[0].Key, Content: "look in the greenhouse first", Score: 50}})
	require.NoError(t, err)

	on := append([]rollout.Job(nil), jobs...)
	for i := range on {
		on[i].Mode = algo.ModeOnPolicyTips
	}
	eps, st, err := r.Run(ctx, on)
	require.NoError(t, err)
	s0 := eps[0].Steps[0]
	require.Len(t, s0.TipSpans, 1, "the tip was retrieved")
	assert.Equal(t, 1, s0.Retrieved)
	assert.Equal(t, 0.5, s0.Intrinsic, "1/(1+1) point")
	assert.Equal(t, off[0].Steps[0].Prompt, s0.PromptWithoutTips(), "memory on = memory off + tip block")
	block, err := m.Detokenize(s0.Prompt[s0.TipSpans[0][0]:s0.TipSpans[0][1]])
	require.NoError(t, err)
	assert.Contains(t, block, "look in the greenhouse first")
	assert.Positive(t, eps[0].Intrinsic)
	assert.LessOrEqual(t, eps[0].Intrinsic, 1.0)
	assert.Positive(t, st.TEmbedRetrieve)
	// the other namespace has no tips: everything is identical to memory off
	testutil.SameSteps(t, off[1].Steps, eps[1].Steps)
	assert.Equal(t, 1.0, eps[1].Intrinsic, "no tips: coef/(0+1)")
}

func TestRolloutTipsWrittenThenRetrieved(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	mem := testutil.Store(t)
	r := testutil.Roller(t, m, 4, mem)
	jobs := testutil.Jobs(3, true)
	eps, _, err := r.Run(ctx, jobs)
	require.NoError(t, err)
	for _, ep := range eps {
		for _, s := range ep.Steps {
			assert.Equal(t, 0, s.Retrieved)
			assert.Empty(t, s.TipSpans)
			assert.Equal(t, 1.0, s.Intrinsic, "nothing retrieved: coef/(0+1)")
		}
	}
	written, err := r.WriteTips(ctx, eps, 7)
	require.NoError(t, err)
	assert.Positive(t, written)
	assert.Positive(t, r.LastTipsDuration())
	for _, ep := range eps {
		assert.NotEmpty(t, ep.Tip)
		assert.Equal(t, rollout.CleanTip(ep.Tip), ep.Tip)
		res, err := mem.RetrieveText(ctx, ep.Namespace(), ep.Steps[0].Key, memstore.Query{K: 100, Threshold: -1})
		require.NoError(t, err)
		require.NotEmpty(t, res.Entries)
		assert.Equal(t, int64(7), res.Entries[0].Step)
		assert.Equal(t, ep.Score, res.Entries[0].Score)
		assert.Contains(t, res.Entries[0].Content, ep.Tip)
		// every entry of the episode is stored under its final conversation
		for _, e := range res.Entries {
			assert.InDelta(t, res.Entries[0].Similarity, e.Similarity, 1e-6, "one key per episode")
		}
	}
	again, st, err := r.Run(ctx, jobs)
	require.NoError(t, err)
	t.Logf("with tips: prompt tokens decoded/unique %d/%d = %.3f, decoded/seen %.3f", st.PromptTokensDecoded, st.PromptTokensUnique,
		float64(st.PromptTokensDecoded)/float64(st.PromptTokensUnique), float64(st.PromptTokensDecoded)/float64(st.PromptTokensSeen))
	for _, ep := range again {
		s0 := ep.Steps[0]
		assert.Positive(t, s0.Retrieved)
		require.NotEmpty(t, s0.TipSpans)
		assert.Less(t, ep.Intrinsic, 1.0)
	}
	_, err = r.WithMemory(mem, true).WriteTips(ctx, eps, 8)
	assert.ErrorIs(t, err, rollout.ErrNoMemory)
	_, err = r.WithMemory(nil, false).WriteTips(ctx, eps, 8)
	assert.ErrorIs(t, err, rollout.ErrNoMemory)
}

func TestRolloutDeterministic(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	a, _, err := testutil.Roller(t, m, 4, nil).Run(ctx, testutil.Jobs(4, false))
	require.NoError(t, err)
	// another context with fewer slots (other batching): same episodes
	b, _, err := testutil.Roller(t, m, 2, nil).Run(ctx, testutil.Jobs(4, false))
	require.NoError(t, err)
	require.Len(t, b, len(a))
	for i := range a {
		require.Len(t, b[i].Steps, len(a[i].Steps))
		for k := range a[i].Steps {
			assert.Equal(t, a[i].Steps[k].Response, b[i].Steps[k].Response)
			assert.Equal(t, a[i].Steps[k].Action, b[i].Steps[k].Action)
			assert.InDeltaSlice(t, a[i].Steps[k].OldLogp, b[i].Steps[k].OldLogp, 1e-4)
		}
		assert.Equal(t, a[i].Score, b[i].Score)
	}
	// another seed: different samples
	r := testutil.Roller(t, m, 4, nil, func(_ *rollout.Config, o *rollout.Options) { o.Seed = 8 })
	c, _, err := r.Run(ctx, testutil.Jobs(4, false))
	require.NoError(t, err)
	assert.NotEqual(t, a[0].Steps[0].Response, c[0].Steps[0].Response)
}

func TestRolloutCorrectInvalid(t *testing.T) {
	m := testutil.Model(t)
	r := testutil.Roller(t, m, 2, nil, func(c *rollout.Config, _ *rollout.Options) { c.CorrectInvalid = rollout.CorrectOn })
	eps, _, err := r.Run(context.Background(), testutil.Jobs(2, false))
	require.NoError(t, err)
	n := 0
	for _, ep := range eps {
		for _, s := range ep.Steps {
			if s.Corrected {
				n++
				assert.NotEqual(t, "No known action matches that input.", s.Observation)
			}
		}
	}
	assert.Positive(t, n, "a random tiny model's actions need correcting")
}

// TestRolloutPool: instances come from a pool smaller than the slot count
// (active episodes are capped by it, never waiting on it), and the
// episodes equal those with private instances.
func TestRolloutPool(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	pool, err := environments.NewPool("textlab", environments.Options{}, 2)
	require.NoError(t, err)
	defer pool.Close()
	r := testutil.Roller(t, m, 4, nil, func(_ *rollout.Config, o *rollout.Options) { o.Pool = pool })
	a, _, err := r.Run(ctx, testutil.Jobs(5, false))
	require.NoError(t, err)
	b, _, err := testutil.Roller(t, m, 4, nil).Run(ctx, testutil.Jobs(5, false))
	require.NoError(t, err)
	for i := range a {
		testutil.SameSteps(t, b[i].Steps, a[i].Steps)
	}
	e, err := pool.Acquire(ctx) // every instance was given back
	require.NoError(t, err)
	require.NoError(t, pool.Release(e))
}

// rollout.tip_temperature: 0 writes tips greedily (the same tips whatever
// the sampling seed); the default (< 0) samples them at the rollout
// temperature (1.0 here), so other seeds give other tips.
func TestWriteTipsTemperature(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	eps, _, err := testutil.Roller(t, m, 4, testutil.Store(t)).Run(ctx, testutil.Jobs(4, false))
	require.NoError(t, err)
	tips := func(tipTemp float64, seed int64) []string {
		r := testutil.Roller(t, m, 4, testutil.Store(t), func(c *rollout.Config, o *rollout.Options) {
			c.TipTemperature, o.Seed = tipTemp, seed
		})
		cp := append([]rollout.Episode(nil), eps...)
		_, err = r.WriteTips(ctx, cp, 1)
		require.NoError(t, err)
		out := make([]string, len(cp))
		for i := range cp {
			out[i] = cp[i].Tip
		}
		return out
	}
	assert.Equal(t, tips(0, 1), tips(0, 2), "greedy tips depend on the seed")
	assert.NotEqual(t, tips(-1, 1), tips(-1, 2), "tips at temperature 1 do not depend on the seed")
	assert.Equal(t, tips(-1, 1), tips(-1, 1))
	assert.Equal(t, tips(1, 3), tips(-1, 3), "tip_temperature < 0 is the rollout temperature (1)")

	c, err := llama.NewContext(m, llama.ContextParams{NSeqMax: 1, NCtx: 512, Threads: 1})
	require.NoError(t, err)
	defer c.Close()
	cfg := rollout.DefaultConfig()
	cfg.TipTemperature = 101
	_, err = rollout.NewRoller(c, cfg, rollout.Options{Env: "textlab"})
	assert.ErrorIs(t, err, rollout.ErrRollout)
}

// TestRolloutReplaysBestEpisode: the reference code's memory (the default:
// conversation keys, the top 10 by score with ties oldest first, tips in
// every turn). Two earlier episodes of one variation write their tips
// (scores 30 and 80); a memory episode of that variation then sees, in the
// user message of every turn, the better episode's entries step by step,
// then the weaker one's; its prompts keep every earlier turn's block, and
// its prompt without tips holds none of them.
func TestRolloutReplaysBestEpisode(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	mem := testutil.Store(t)
	r := testutil.Roller(t, m, 3, mem)
	require.Equal(t, rollout.DefaultMemoryConfig(), r.MemoryConfig())
	earlier, _, err := r.Run(ctx, []rollout.Job{{Task: "melt", Seed: 1}, {Task: "melt", Seed: 2}})
	require.NoError(t, err)
	earlier[0].Score, earlier[1].Score = 30, 80
	_, err = r.WriteTips(ctx, earlier, 1)
	require.NoError(t, err)
	// expected: the score-80 episode's entries in step order, then the
	// score-30 one's (an episode's repeated actions give one entry)
	var want []memstore.Match
	seen := map[string]bool{}
	for _, ep := range []rollout.Episode{earlier[1], earlier[0]} {
		for _, s := range ep.Steps {
			c := rollout.TipContent(ep.Tip, s.Action, ep.Score)
			if !seen[c] {
				seen[c] = true
				want = append(want, memstore.Match{Entry: memstore.Entry{Content: c}})
			}
		}
	}
	want = want[:min(len(want), r.MemoryConfig().TopK)]
	block := rollout.FormatTips(want)
	eps, _, err := r.Run(ctx, []rollout.Job{{Task: "melt", Seed: 3, Mode: algo.ModeOnPolicyTips}})
	require.NoError(t, err)
	require.NotEmpty(t, eps[0].Steps)
	for k, s := range eps[0].Steps {
		assert.Equal(t, block, s.Tips, "step %d: the best episode replayed step by step", k)
		assert.Equal(t, len(want), s.Retrieved)
		require.Len(t, s.TipSpans, k+1, "step %d: every turn keeps its block", k)
		text, err := m.Detokenize(s.Prompt)
		require.NoError(t, err)
		assert.Equal(t, k+1, strings.Count(text, rollout.TipSep+block), "step %d", k)
		bare, err := m.Detokenize(s.PromptWithoutTips())
		require.NoError(t, err)
		assert.NotContains(t, bare, rollout.TipsBegin)
		for _, w := range want {
			assert.NotContains(t, bare, w.Content)
		}
		assert.Equal(t, rollout.StripTips(text), bare, "step %d: the prompt without tips is the prompt with its blocks removed", k)
	}
}

// TestMemoryConfigMeansWhatItSays: every value of the memory section is
// used as given: threshold 0 stays 0 (every positive cosine; memstore
// takes it literally), while a top_k of 0 and the other out-of-range
// values are refused instead of silently replaced by defaults.
func TestMemoryConfigMeansWhatItSays(t *testing.T) {
	m := testutil.Model(t)
	c := testutil.Context(t, m, 1)
	mc := rollout.DefaultMemoryConfig()
	require.NoError(t, mc.Validate())
	mc.Threshold = 0
	r, err := rollout.NewRoller(c, testutil.RollerOn(t, c, nil).Config(), rollout.Options{Env: "textlab", MemoryConfig: mc})
	require.NoError(t, err)
	assert.Equal(t, 0.0, r.MemoryConfig().Threshold)
	assert.Equal(t, memstore.Query{K: 10, Threshold: 0, Order: memstore.OrderByScoreStable}, r.MemoryConfig().Query())
	for name, edit := range map[string]func(*rollout.MemoryConfig){
		"top_k 0":        func(m *rollout.MemoryConfig) { m.TopK = 0 },
		"top_k -1":       func(m *rollout.MemoryConfig) { m.TopK = -1 },
		"threshold 1":    func(m *rollout.MemoryConfig) { m.Threshold = 1 },
		"threshold NaN":  func(m *rollout.MemoryConfig) { m.Threshold = math.NaN() },
		"key_pieces 0":   func(m *rollout.MemoryConfig) { m.KeyPieces = 0 },
		"key":            func(m *rollout.MemoryConfig) { m.Key = "state" },
		"tips_in":        func(m *rollout.MemoryConfig) { m.TipsIn = "first-turn" },
		"embedder empty": func(m *rollout.MemoryConfig) { m.Embedder = "" },
		"intrinsic < 0":  func(m *rollout.MemoryConfig) { m.IntrinsicCoef = -1 },
		"cap < 0":        func(m *rollout.MemoryConfig) { m.Cap = -1 },
	} {
		bad := rollout.DefaultMemoryConfig()
		edit(&bad)
		assert.ErrorIs(t, bad.Validate(), rollout.ErrRollout, name)
		_, err := rollout.NewRoller(c, rollout.DefaultConfig(), rollout.Options{Env: "textlab", MemoryConfig: bad})
		assert.ErrorIs(t, err, rollout.ErrRollout, name)
	}
	_, err = rollout.NewRoller(c, rollout.DefaultConfig(), rollout.Options{Env: "textlab"}) // a zero memory section
	assert.ErrorIs(t, err, rollout.ErrRollout)
	cfg := rollout.DefaultConfig()
	cfg.TipMaxTokens = 0
	_, err = rollout.NewRoller(c, cfg, rollout.Options{Env: "textlab", MemoryConfig: rollout.DefaultMemoryConfig()})
	assert.ErrorIs(t, err, rollout.ErrRollout, "tip_max_tokens 0")
	_, _, err = rollout.OpenEmbedder(rollout.MemoryConfig{Embedder: rollout.EmbedderHash}, nil, 1)
	assert.ErrorIs(t, err, rollout.ErrRollout, "key_pieces 0")
	emb, closeEmb, err := rollout.OpenEmbedder(rollout.DefaultMemoryConfig(), nil, 1)
	require.NoError(t, err)
	defer closeEmb()
	assert.Equal(t, rollout.DefaultKeyPieces, emb.(*memstore.HashEmbedder).MaxPieces())
}

// TestRolloutKVReuseWithTips: memory episodes on a fresh context (nothing
// in the slots from an earlier run) decode about each distinct prompt
// token once, with tips kept in every turn (each prompt extends the
// previous one) and with tips in the last turn only (a prompt drops the
// previous block: the rest of it is decoded again, and counted as new).
func TestRolloutKVReuseWithTips(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	mem := testutil.Store(t)
	jobs := testutil.Jobs(4, true)
	first, _, err := testutil.Roller(t, m, 4, mem).Run(ctx, jobs)
	require.NoError(t, err)
	_, err = testutil.Roller(t, m, 4, mem).WriteTips(ctx, first, 1)
	require.NoError(t, err)
	for _, in := range []rollout.TipsIn{rollout.TipsEveryTurn, rollout.TipsLastTurn} {
		r := testutil.Roller(t, m, 4, mem, func(c *rollout.Config, o *rollout.Options) {
			o.MemoryConfig.TipsIn = in
			c.StepLimit = 5
		})
		for i := range jobs {
			jobs[i].Seed += 10
		}
		eps, st, err := r.Run(ctx, jobs)
		require.NoError(t, err)
		blocks := 0
		for _, ep := range eps {
			for _, s := range ep.Steps {
				blocks += len(s.TipSpans)
			}
		}
		require.Positive(t, blocks)
		ratio := float64(st.PromptTokensDecoded) / float64(st.PromptTokensUnique)
		t.Logf("tips_in %s: prompt tokens decoded/unique %d/%d = %.3f, seen/unique %.2f, %d tip blocks in %d prompts", in,
			st.PromptTokensDecoded, st.PromptTokensUnique, ratio, float64(st.PromptTokensSeen)/float64(st.PromptTokensUnique), blocks, st.EnvSteps)
		assert.LessOrEqual(t, ratio, 1.1)
		assert.GreaterOrEqual(t, ratio, 0.9)
	}
}
