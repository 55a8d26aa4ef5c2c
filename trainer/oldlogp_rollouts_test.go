package trainer

import (
	"context"
	"slices"
	"testing"

	"github.com/empo2/empo2/trainer/internal/testutil"
)

// TestBehaviourChainsFromRollouts: in real off-policy rollouts with tips in
// every turn (testutil's roller), every step's prompt with tips extends the
// previous step's prompt with tips and response, so recomputeOld scores one
// behaviour sequence per episode.
func TestBehaviourChainsFromRollouts(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	mem := testutil.Store(t)
	r := testutil.Roller(t, m, 4, mem)
	jobs := testutil.Jobs(4, false)
	first, _, err := r.Run(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteTips(ctx, first, 1); err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		jobs[i].Mode, jobs[i].Group = ModeOffPolicy, 0
		jobs[i].Seed += 50
	}
	eps, _, err := r.Run(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	chained, broken := 0, 0
	for _, ep := range eps {
		for k := 1; k < len(ep.Steps); k++ {
			prev := append(slices.Clone(ep.Steps[k-1].Prompt), ep.Steps[k-1].Response...)
			if extends(ep.Steps[k].Prompt, prev) {
				chained++
			} else {
				broken++
				p := ep.Steps[k].Prompt
				n := 0
				for n < len(p) && n < len(prev) && p[n] == prev[n] {
					n++
				}
				t.Logf("step %d: common prefix %d of %d (prev %d); prev tail %v, next at %v", k, n, len(p), len(prev), prev[max(0, n-3):min(len(prev), n+5)], p[max(0, n-3):min(len(p), n+5)])
			}
		}
	}
	if broken > 0 || chained == 0 {
		t.Fatalf("%d steps extend the previous behaviour sequence, %d do not", chained, broken)
	}
}
