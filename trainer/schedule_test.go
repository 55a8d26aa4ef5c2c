package trainer

import (
	"context"
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
