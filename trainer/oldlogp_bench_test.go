package trainer

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/internal/qwentok"
	"github.com/empo2/empo2/modelgen"
)

// BenchmarkOffPolicyStep (issue 40 §5): an off-policy EMPO² step against a
// no-tip step with Qwen's real vocabulary (the tiny model, 2 layers, hidden
// 64, with Qwen's tokenizer padded to 152,064 tokens, tied: the head is
// 64 × 152,064), on textlab with a length bonus, 2 tasks × 4 rollouts, ≤ 6
// turns of ≤ 16 tokens, one thread. Arms: every rollout off-policy with
// tips retrieved each turn and kept in every turn (memory.tips_in
// every-turn, the reference), π_old recomputed by the engine; and the same
// run with no memory (memory_prob 0). Step 2 of each run (step 1 warms up):
// t_step_s and t_old_logp_s of each arm and the ratio (goal ≤ 1.3).
func BenchmarkOffPolicyStep(b *testing.B) {
	dir := qwentok.Dir(b)
	tok, err := modelgen.LoadHFTokenizer(dir)
	if err != nil {
		b.Fatal(err)
	}
	cfg := modelgen.DefaultConfig()
	cfg.HFTokenizer, cfg.Vocab, cfg.TiedEmbeddings, cfg.Ctx = tok, 152064, true, 2048
	model := filepath.Join(b.TempDir(), "qwen-vocab.gguf")
	if err := modelgen.Write(model, cfg); err != nil {
		b.Fatal(err)
	}
	run := func(memoryProb string) StepMetrics {
		c, err := LoadConfig("", "empo2", []string{"env=textlab-noisy", "tasks=[melt/0, light-bulb/1, find-living-thing/0]",
			"mode.memory_prob=" + memoryProb, "mode.offpolicy_prob=1", "mode.per=rollout", "memory.top_k=3", "memory.threshold=0.01",
			"memory.tips_in=every-turn", "update.old_logp=recompute", "update.low_prob_threshold=-20", "rollout.tip_max_tokens=16",
			"context=2048", "seed=1"})
		if err != nil {
			b.Fatal(err)
		}
		c.Model, c.Steps, c.Threads = model, 2, 1
		c.Batch = BatchConfig{Tasks: 2, Rollouts: 4}
		c.Rollout.StepLimit, c.Rollout.Prompt.MaxActionTokens = 6, 16
		var last StepMetrics
		if _, err := Train(context.Background(), RunOptions{Dir: filepath.Join(b.TempDir(), "run"), Config: c, OnStep: func(m StepMetrics) { last = m }}); err != nil {
			b.Fatal(err)
		}
		return last
	}
	for i := 0; i < b.N; i++ {
		off := run("1")
		none := run("0")
		b.ReportMetric(off.TStep, "offpolicy_step_s")
		b.ReportMetric(off.TOldLogp, "offpolicy_old_logp_s")
		b.ReportMetric(off.TUpdate, "offpolicy_update_s")
		b.ReportMetric(none.TStep, "notip_step_s")
		b.ReportMetric(none.TUpdate, "notip_update_s")
		b.ReportMetric(float64(off.TrainedTokens), "offpolicy_trained_tokens")
		b.ReportMetric(float64(none.TrainedTokens), "notip_trained_tokens")
		b.ReportMetric(off.TStep/none.TStep, "ratio")
	}
}
