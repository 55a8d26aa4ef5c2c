package environments

// Tip truth: an environment that knows its observation grammar can say
// whether a tip written after an episode (EMPO²'s memory notes) states
// facts of that episode. The trainer finds the checker through the
// registry (Spec.TipChecker), so it never imports an environment's parsing.

// Trajectory is a finished episode as the environment produced it.
type Trajectory struct {
	Task      string
	Variation int
	FirstObs  string // the observation Reset returned
	Steps     []TrajectoryStep
	Score     float64 // the final score (Env.Score at the end)
}

// TrajectoryStep is one step of a Trajectory.
type TrajectoryStep struct {
	Action      string // the action sent to the environment (after any correction)
	Observation string
	Reward      float64
}

// TipVerdict is what a TipChecker found in one tip. A tip is split into
// sentences; a sentence in the checker's claim vocabulary contributes its
// claims (Claims counts them, False lists those that do not hold, in
// words), any other sentence is Unparsed.
type TipVerdict struct {
	Claims   int
	False    []string
	Unparsed []string
}

// WellFormed: every sentence of the tip is a claim sentence of the
// vocabulary and it makes at least one claim.
func (v TipVerdict) WellFormed() bool { return v.Claims > 0 && len(v.Unparsed) == 0 }

// True: well-formed, and every claim holds on the trajectory.
func (v TipVerdict) True() bool { return v.WellFormed() && len(v.False) == 0 }

// TipChecker is implemented by environments that can check a tip against
// the episode it was written after (Spec.TipChecker).
type TipChecker interface {
	CheckTip(tip string, tr Trajectory) TipVerdict
}

// TipCheckerOf returns the tip checker of the environment registered under
// name, or nil when it has none (or is not registered).
func TipCheckerOf(name string) TipChecker {
	s, err := Lookup(name)
	if err != nil {
		return nil
	}
	return s.TipChecker
}
