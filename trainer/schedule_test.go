package trainer

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/empo2/empo2/trainer/internal/testutil"
)

// TestCosineFollowsUpdates: a real short run with the cosine schedule and
// two sequences per optimizer step (mini_batch 2, no packing: a step makes
// half as many updates as it has responses with a signal). The lr column of
// metrics.jsonl (the last update of each step) follows the cosine at the
// run's progress counted over the updates that happened, recomputed from
// the run's own updates column: (k − 1 + (n_k − 1)/n_k)/steps, and 1 at the
// last step's last update, which is at min_lr (issue 36 (d)). The former
// estimate (B·G/mini_batch updates per step) reached min_lr by the middle
// of the run.
func TestCosineFollowsUpdates(t *testing.T) {
	model := testutil.ModelFile(t)
	const steps, base, minLR = 3, 0.01, 0.001
	cfg := tinyRunConfig(t, model, "grpo", steps, "update.schedule=cosine", "update.min_lr=0.001", "update.mini_batch=2", "update.mini_batches=0", "update.pack=false")
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
		if k == steps-1 {
			p = 1
		}
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
	if last := ms[steps-1]["lr"].(float64); math.Abs(last-minLR) > 1e-12*base || oldLast != minLR {
		t.Fatalf("last lr %v (the former estimate %v): the schedule must end at min_lr with its last update, not before", last, oldLast)
	}
}

// TestProgressEnds (issue 36 (d)): the run's first update is at progress
// 0 and its last at 1 — the cosine's last update at min_lr, as
// update.schedule's doc says — whatever the updates per step; progress
// never decreases from one update to the next, across steps too.
func TestProgressEnds(t *testing.T) {
	for _, c := range []struct{ steps, n, nLast int }{{3, 4, 4}, {3, 4, 7}, {5, 1, 1}, {2, 3, 1}, {1, 5, 5}, {4, 2, 2}} {
		prev := -1.0
		for s := 1; s <= c.steps; s++ {
			n := c.n
			if s == c.steps {
				n = c.nLast
			}
			for j := 0; j < n; j++ {
				p := Progress{Step: s, Steps: c.steps}.at(j, n)
				if p < prev || p < 0 || p > 1 {
					t.Fatalf("%+v: step %d update %d at %v after %v", c, s, j, p, prev)
				}
				if s == 1 && j == 0 && p != 0 {
					t.Fatalf("%+v: first update at %v, want 0", c, p)
				}
				if s == c.steps && j == n-1 && p != 1 {
					t.Fatalf("%+v: last update at %v, want 1", c, p)
				}
				prev = p
			}
		}
	}
	if p := (Progress{Step: 1, Steps: 1}).at(0, 1); p != 0 {
		t.Fatalf("a run of one update at %v, want 0 (its first)", p)
	}
	if p := (Progress{}).at(0, 1); p != -1 {
		t.Fatalf("no run length: %v, want −1 (the schedule's update index)", p)
	}
	// the cosine at the last update is min_lr
	cfg := DefaultConfig()
	cfg.Update.Schedule, cfg.Update.LR, cfg.Update.MinLR = "cosine", 1e-3, 1e-5
	s, err := cfg.Schedule()
	if err != nil {
		t.Fatal(err)
	}
	if lr := s.LRAt(40, Progress{Step: cfg.Steps, Steps: cfg.Steps}.at(3, 4)); math.Abs(lr-1e-5) > 1e-18 {
		t.Fatalf("the last update's lr %v, want min_lr 1e-5", lr)
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

// TestDefaultSeveralUpdates (issue 36 (a)): by default a training step
// makes several optimizer updates, as the authors' do — update.mini_batches
// 8 in every preset: at their scale (16 tasks × 8 rollouts, one packed
// sequence per episode) 8 mini-batches of 16 sequences, at the tiny default
// scale (2 × 4) one update per sample.
func TestDefaultSeveralUpdates(t *testing.T) {
	for _, p := range []string{"empo2", "grpo", "memory-only", "scienceworld"} {
		c, err := LoadConfig("", p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.Update.MiniBatches != DefaultMiniBatches || c.Update.MiniBatch != 0 || c.Update.PPOEpochs != 1 {
			t.Errorf("preset %s: mini_batches %d, mini_batch %d, ppo_epochs %d", p, c.Update.MiniBatches, c.Update.MiniBatch, c.Update.PPOEpochs)
		}
	}
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	mb := MiniBatching{Size: c.Update.MiniBatch, Count: c.Update.MiniBatches}
	ref := mb.cuts(16 * 8)
	if len(ref) != 8 {
		t.Fatalf("16 × 8 sequences: %d updates, want 8", len(ref))
	}
	for k, hi := range ref {
		if hi != 16*(k+1) {
			t.Fatalf("16 × 8 sequences: cuts %v, want mini-batches of 16", ref)
		}
	}
	if n := len(mb.cuts(c.Batch.Tasks * c.Batch.Rollouts)); n != c.Batch.Tasks*c.Batch.Rollouts {
		t.Fatalf("default scale: %d updates for %d sequences", n, c.Batch.Tasks*c.Batch.Rollouts)
	}
	// cutting by size needs the count off, and says so
	c.Update.MiniBatch = 16
	if err := c.Validate(); !errors.Is(err, ErrRunConfig) || !strings.Contains(err.Error(), "update.mini_batches=0") {
		t.Fatalf("mini_batch with the default count: %v", err)
	}
	c.Update.MiniBatches = 0
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
