package rollout

import "github.com/empo2/empo2/environments"

// Trajectory is the episode as its environment produced it (the actions
// sent, observations, rewards and final score), for an
// environments.TipChecker.
func (e *Episode) Trajectory() environments.Trajectory {
	tr := environments.Trajectory{Task: e.Task, Variation: e.Variation, FirstObs: e.FirstObs, Score: e.Score,
		Steps: make([]environments.TrajectoryStep, len(e.Steps))}
	for i, s := range e.Steps {
		tr.Steps[i] = environments.TrajectoryStep{Action: s.Action, Observation: s.Observation, Reward: s.Reward}
	}
	return tr
}

// TipTally counts the tips of a set of episodes by the checker's verdict.
type TipTally struct {
	Tips       int // episodes with a tip (Episode.Tip, set by WriteTips)
	WellFormed int // tips whose every sentence is a claim of the checker's vocabulary
	True       int // well-formed tips whose every claim holds on the episode
}

// CheckTips checks every episode's tip against its own trajectory.
func CheckTips(c environments.TipChecker, eps []Episode) TipTally {
	var t TipTally
	for i := range eps {
		if eps[i].Tip == "" {
			continue
		}
		v := c.CheckTip(eps[i].Tip, eps[i].Trajectory())
		t.Tips++
		if v.WellFormed() {
			t.WellFormed++
		}
		if v.True() {
			t.True++
		}
	}
	return t
}

// Fractions are True/Tips and WellFormed/Tips; ok is false when there are
// no tips (no fraction to report).
func (t TipTally) Fractions() (trueFrac, wellFormedFrac float64, ok bool) {
	if t.Tips == 0 {
		return 0, 0, false
	}
	n := float64(t.Tips)
	return float64(t.True) / n, float64(t.WellFormed) / n, true
}
