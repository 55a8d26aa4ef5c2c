package trainer

import (
	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/trainer/rollout"
)

// tipTruth checks the tips written after eps with the environment's
// TipChecker: the fractions of true and of well-formed tips (metrics.jsonl's
// tips_true_frac, tips_wellformed_frac), nil when the environment has no
// checker or no episode has a tip.
func tipTruth(env string, eps []rollout.Episode) (trueFrac, wellFormedFrac *float64) {
	c := environments.TipCheckerOf(env)
	if c == nil {
		return nil, nil
	}
	t, w, ok := rollout.CheckTips(c, eps).Fractions()
	if !ok {
		return nil, nil
	}
	return &t, &w
}
