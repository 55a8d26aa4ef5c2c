package trainer

import (
	"context"
	"path/filepath"
	"slices"
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
// t_step_s and t_old_logp_s of each arm (the last round's) and the ratio
// (goal ≤ 1.3): the median over b.N rounds (-benchtime Nx) in which the
// two arms alternate, with its min and max. The no-tip arm's π_old
// (t_old_logp_s) is the recompute RunUpdates makes in its own graphs.
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
	// the arms alternate (off first in odd rounds, no-tip first in even
	// ones) and the ratio reported is the median of the rounds' ratios: a
	// load that drifts during a round moves both arms, not one
	var ratios []float64
	var off, none StepMetrics
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			off, none = run("1"), run("0")
		} else {
			none, off = run("0"), run("1")
		}
		ratios = append(ratios, off.TStep/none.TStep)
		b.Logf("round %d: off-policy step %.1f s (π_old %.1f s, update %.1f s), no-tip step %.1f s (π_old %.1f s, update %.1f s): ratio %.3f",
			i+1, off.TStep, off.TOldLogp, off.TUpdate, none.TStep, none.TOldLogp, none.TUpdate, off.TStep/none.TStep)
	}
	b.ReportMetric(off.TStep, "offpolicy_step_s")
	b.ReportMetric(off.TOldLogp, "offpolicy_old_logp_s")
	b.ReportMetric(off.TUpdate, "offpolicy_update_s")
	b.ReportMetric(none.TStep, "notip_step_s")
	b.ReportMetric(none.TOldLogp, "notip_old_logp_s")
	b.ReportMetric(none.TUpdate, "notip_update_s")
	b.ReportMetric(float64(off.TrainedTokens), "offpolicy_trained_tokens")
	b.ReportMetric(float64(none.TrainedTokens), "notip_trained_tokens")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "ratio")
	b.ReportMetric(ratios[0], "ratio_min")
	b.ReportMetric(ratios[len(ratios)-1], "ratio_max")
}
