package trainer

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
)

// tipTruth reports the fractions of true and well-formed tips with the
// environment's checker, and nothing without tips or without a checker.
func TestTipTruth(t *testing.T) {
	ep := func(tip string) rollout.Episode {
		return rollout.Episode{Job: rollout.Job{Task: "melt", Variation: 0}, Tip: tip, Score: 0,
			Steps: []rollout.StepRecord{{Action: "wait1", Observation: "You decide to wait for 1 iterations."}}}
	}
	eps := []rollout.Episode{
		ep("The task is not complete: score 0/100 after 1 steps."),        // true
		ep("The task is not complete: score 0/100 after 2 steps."),        // wrong step count
		ep("No action earned score. The episode ended with score 0/100."), // second sentence outside the vocabulary
		ep("No action earned score."),                                     // true
		ep(""),                                                            // no tip: not counted
	}
	tf, wf := tipTruth("textlab", eps)
	if tf == nil || wf == nil || *tf != 0.5 || *wf != 0.75 {
		t.Fatalf("tipTruth = %v, %v; want 0.5, 0.75", tf, wf)
	}
	if tf, wf := tipTruth("textlab", eps[4:]); tf != nil || wf != nil {
		t.Fatalf("no tips: %v %v", tf, wf)
	}
	if tf, wf := tipTruth("textlab-noisy", eps); tf != nil || wf != nil {
		t.Fatalf("an environment without a checker: %v %v", tf, wf)
	}
}

// metrics.jsonl carries the fractions on a step that wrote tips in
// textlab, and omits them when no tip was written (grpo) or the
// environment has no checker (textlab-noisy).
func TestTipTruthMetrics(t *testing.T) {
	model := testutil.ModelFile(t)
	for _, tc := range []struct {
		preset, env string
		want        bool
	}{{"memory-only", "textlab", true}, {"grpo", "textlab", false}, {"memory-only", "textlab-noisy", false}} {
		dir := filepath.Join(t.TempDir(), "run")
		cfg := tinyRunConfig(t, model, tc.preset, 1, "env="+tc.env)
		if _, err := Train(context.Background(), RunOptions{Dir: dir, Config: cfg}); err != nil {
			t.Fatal(err)
		}
		m := readMetrics(t, dir)[0]
		tf, okT := m["tips_true_frac"].(float64)
		wf, okW := m["tips_wellformed_frac"].(float64)
		if okT != tc.want || okW != tc.want {
			t.Fatalf("%s on %s: tips_true_frac %v, tips_wellformed_frac %v (want present: %v)", tc.preset, tc.env, m["tips_true_frac"], m["tips_wellformed_frac"], tc.want)
		}
		if tc.want && (tf < 0 || tf > wf || wf > 1 || m["tips_written"].(float64) == 0) {
			t.Fatalf("fractions %v ≤ %v out of order or no tips written: %v", tf, wf, m)
		}
	}
}
