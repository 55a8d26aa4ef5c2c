package trainer

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/modelgen"
)

// BenchmarkTrainStep measures one EMPO² training step by phase (issue
// 11.8) on the tiny generated model and the ~86M one (12 layers, hidden
// 768, GQA 12/2, FFN 2048, vocab 8192, F32), on textlab with a length
// bonus (so that GRPO groups have variance and the update runs), memory on
// every step (half the episodes off-policy, half on-policy with tips).
// Step 1 warms up; the figures are step 2's (metrics.jsonl):
//
//	t_rollout_s, t_embed_retrieve_s, t_tips_s, t_old_logp_s, t_update_s
//	rollout_tok/s   generated tokens / rollout time (env steps, prompts and tips included)
//	llama_tok/s     llama.cpp's own batched decode (Context.GenerateMany) of the same number
//	                of sequences from the same first prompts, the same tokens per sequence
//	ratio           rollout_tok/s / llama_tok/s (target ≥ 0.9)
//	decoded/unique  prompt tokens decoded per unique prompt token of the
//	                trajectories (KV reuse; target ≤ 1.1)
//	seen/unique     what re-prefilling every turn would decode (≈ T/2 for T turns)
func BenchmarkTrainStep(b *testing.B) {
	// One thread by default: on the shared 2-core development machine
	// multi-threaded ggml spins badly under load (EMPO2_BENCH_THREADS=N
	// overrides, e.g. on a dedicated machine).
	threads := 1
	if n, err := strconv.Atoi(os.Getenv("EMPO2_BENCH_THREADS")); err == nil && n > 0 {
		threads = min(n, runtime.NumCPU())
	}
	for _, mc := range []struct {
		name            string
		cfg             modelgen.Config
		tasks, rollouts int
		stepLimit, toks int
	}{
		{"tiny", func() modelgen.Config { c := modelgen.DefaultConfig(); c.Ctx = 2048; return c }(), 2, 4, 6, 16},
		{"86M", func() modelgen.Config {
			c := modelgen.DefaultConfig()
			c.Layers, c.Hidden, c.Heads, c.KVHeads, c.FFN, c.Vocab, c.Ctx = 12, 768, 12, 2, 2048, 8192, 2048
			return c
		}(), 2, 2, 3, 16},
	} {
		b.Run(mc.name, func(b *testing.B) {
			model := filepath.Join(b.TempDir(), "m.gguf")
			if err := modelgen.Write(model, mc.cfg); err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				c, err := LoadConfig("", "empo2", []string{"env=textlab-noisy", "tasks=[melt/0, light-bulb/1, find-living-thing/0]",
					"mode.memory_prob=1", "mode.offpolicy_prob=0.5", "mode.per=rollout", "memory.top_k=3", "memory.threshold=0.01",
					"update.low_prob_threshold=-20", "rollout.tip_max_tokens=16", "context=2048", "seed=1"})
				if err != nil {
					b.Fatal(err)
				}
				c.Model, c.Steps, c.Threads = model, 2, threads
				c.Batch = BatchConfig{Tasks: mc.tasks, Rollouts: mc.rollouts}
				c.Rollout.StepLimit, c.Rollout.Prompt.MaxActionTokens = mc.stepLimit, mc.toks
				dir := filepath.Join(b.TempDir(), "run")
				var last StepMetrics
				if _, err := Train(context.Background(), RunOptions{Dir: dir, Config: c, OnStep: func(m StepMetrics) { last = m }}); err != nil {
					b.Fatal(err)
				}
				unique := float64(max(1, last.PromptUnique))
				base := llamaBatchedTPS(b, model, c, threads, last.PromptDecoded/max(1, last.Episodes), last.GenTokens/max(1, last.Episodes))
				rtps := float64(last.GenTokens) / last.TRollout
				b.ReportMetric(last.TRollout, "t_rollout_s")
				b.ReportMetric(last.TEmbedRetrieve, "t_embed_retrieve_s")
				b.ReportMetric(last.TTips, "t_tips_s")
				b.ReportMetric(last.TOldLogp, "t_old_logp_s")
				b.ReportMetric(last.TUpdate, "t_update_s")
				b.ReportMetric(last.TStep, "t_step_s")
				b.ReportMetric(rtps, "rollout_tok/s")
				b.ReportMetric(base, "llama_tok/s")
				b.ReportMetric(rtps/base, "ratio")
				b.ReportMetric(float64(last.PromptDecoded)/unique, "decoded/unique")
				b.ReportMetric(float64(last.PromptSeen)/unique, "seen/unique")
				b.ReportMetric(float64(last.UnpackedTokens)/float64(max(1, last.SampleTokens)), "unpacked/packed")
			}
		})
	}
}

// llamaBatchedTPS times llama.cpp's batched decode of n sequences (as many
// as the step's episodes) doing the rollout's work in one go: a prompt of
// plen tokens each (the prompt tokens an episode decoded) and gen sampled
// tokens each; the rate is sampled tokens per second, as the rollout's.
func llamaBatchedTPS(b *testing.B, model string, c Config, threads, plen, gen int) float64 {
	b.Helper()
	n := c.Batch.Tasks * c.Batch.Rollouts
	m, err := llama.LoadModel(model, llama.ModelParams{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	lc, err := llama.NewContext(m, llama.ContextParams{NCtx: c.Context, NSeqMax: n, Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	defer lc.Close()
	text, err := m.Tokenize("You are an agent in a text-based environment. Task: melt the ice. You are in the kitchen. ", false, false)
	if err != nil {
		b.Fatal(err)
	}
	var prompt []int32
	for len(prompt) < max(plen, 1) {
		prompt = append(prompt, text...)
	}
	prompt = prompt[:max(plen, 1)]
	prompts := make([][]int32, n)
	for i := range prompts {
		prompts[i] = prompt
	}
	best := time.Duration(1 << 62)
	for r := 0; r < 3; r++ {
		t := time.Now()
		if _, err := lc.GenerateMany(context.Background(), prompts, llama.SampleParams{N: 1, MaxTokens: max(gen, 1), Temperature: 1, Seed: uint64(r), IgnoreEOG: true}); err != nil {
			b.Fatal(err)
		}
		best = min(best, time.Since(t))
	}
	return float64(n*max(gen, 1)) / best.Seconds()
}
