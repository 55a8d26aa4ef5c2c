package trainer

import (
	"slices"
	"testing"
)

// TestBehaviourChainsFromRollouts: in real off-policy rollouts with tips in
// every turn (testutil's roller), every step's prompt with tips extends the
// previous step's prompt with tips and response, so recomputeOld scores one
// behaviour sequence per episode.
func TestBehaviourChainsFromRollouts(t *testing.T) {
	_, _, eps := offPolicyTipRollouts(t)
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
