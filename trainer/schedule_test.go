package trainer

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/trainer/internal/testutil"
)

// TestCosineFollowsUpdates: a real short run with the cosine schedule and
// two sequences per optimizer step (mini_batch 2, no packing: a step makes
// half as many updates as it has responses with a signal). The lr column of
// metrics.jsonl (the last update of each step) follows the cosine at the
// run's progress counted over the updates that happened, recomputed from
// the run's own updates column: (k − 1 + (n_k − 1)/n_k)/steps. The former
// estimate (B·G/mini_batch updates per step) reached min_lr by the middle
// of the run.
func TestCosineFollowsUpdates(t *testing.T) {
	model := testutil.ModelFile(t)
	const steps, base, minLR = 3, 0.01, 0.001
	cfg := tinyRunConfig(t, model, "grpo", steps, "update.schedule=cosine", "update.min_lr=0.001", "update.mini_batch=2", "update.pack=false")
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := Train(context.Background(), RunOptions{Dir: dir, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, dir)
	if len(ms) != steps {
		t.Fatalf("%d metrics lines", len(ms))
	}
	done, oldLast := 0, 0.0
	oldTotal := steps * cfg.Batch.Tasks * cfg.Batch.Rollouts / 2 // the former estimate: B·G/mini_batch per step
	for k, m := range ms {
		n := int(m["updates"].(float64))
		if n == 0 {
			continue
		}
		if seqs := int(m["sequences"].(float64)); (seqs+1)/2 != n {
			t.Fatalf("step %d: %v updates for %v sequences (mini_batch 2)", k+1, n, seqs)
		}
		p := (float64(k) + float64(n-1)/float64(n)) / steps
		want := minLR + (base-minLR)*0.5*(1+math.Cos(math.Pi*p))
		if got := m["lr"].(float64); math.Abs(got-want) > 1e-12*base {
			t.Fatalf("step %d (%d updates): lr %v, want %v (progress %.4f)", k+1, n, got, want, p)
		}
		done += n
		oldLast = minLR + (base-minLR)*0.5*(1+math.Cos(math.Pi*min(1, float64(done-1)/float64(oldTotal))))
		t.Logf("step %d: %d updates, lr %.6g (the former estimate: %.6g)", k+1, n, m["lr"], oldLast)
	}
	if done <= oldTotal {
		t.Fatalf("%d updates: the run does not show the former estimate's error (%d)", done, oldTotal)
	}
	if last := ms[steps-1]["lr"].(float64); !(last > minLR) || oldLast != minLR {
		t.Fatalf("last lr %v (the former estimate %v): the schedule must end at its last update, not before", last, oldLast)
	}
}

// TestMiniBatchCuts: mini-batches by size and by count cover an epoch's
// samples once, in order; by count there are min(count, n) of them whose
// sizes differ by at most one.
func TestMiniBatchCuts(t *testing.T) {
	for _, c := range []struct {
		b    MiniBatching
		n    int
		want []int
	}{
		{MiniBatching{}, 5, []int{5}},
		{MiniBatching{Size: 2}, 5, []int{2, 4, 5}},
		{MiniBatching{Size: 9}, 5, []int{5}},
		{MiniBatching{Count: 2}, 5, []int{2, 5}},
		{MiniBatching{Count: 4}, 16, []int{4, 8, 12, 16}},
		{MiniBatching{Count: 4}, 6, []int{1, 3, 4, 6}},
		{MiniBatching{Count: 4}, 3, []int{1, 2, 3}},
		{MiniBatching{Count: 1}, 7, []int{7}},
	} {
		got := c.b.cuts(c.n)
		if len(got) != len(c.want) {
			t.Fatalf("%+v of %d: cuts %v, want %v", c.b, c.n, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("%+v of %d: cuts %v, want %v", c.b, c.n, got, c.want)
			}
		}
	}
}

// TestMiniBatchesCount: a real short run with update.mini_batches 2 and
// two PPO epochs makes 2·2 = 4 updates in every step with at least two
// samples, whatever their number (metrics.jsonl: updates, sequences).
func TestMiniBatchesCount(t *testing.T) {
	model := testutil.ModelFile(t)
	cfg := tinyRunConfig(t, model, "grpo", 2, "update.mini_batches=2", "update.ppo_epochs=2", "update.pack=false")
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := Train(context.Background(), RunOptions{Dir: dir, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for k, m := range readMetrics(t, dir) {
		n, seqs := int(m["updates"].(float64)), int(m["sequences"].(float64))
		want := 2 * min(2, seqs)
		if seqs == 0 {
			want = 0
		}
		if n != want {
			t.Fatalf("step %d: %d updates for %d sequences, want %d", k+1, n, seqs, want)
		}
		if seqs >= 2 {
			seen++
		}
	}
	if seen == 0 {
		t.Skip("no step had two samples with a signal")
	}
	bad, err := LoadConfig("", "grpo", []string{"env=textlab", "update.mini_batches=2", "update.mini_batch=3"})
	if err == nil {
		err = bad.Validate()
	}
	if !errors.Is(err, ErrRunConfig) {
		t.Fatal("mini_batch and mini_batches both set: accepted")
	}
}
